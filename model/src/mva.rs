//! Exact mean value analysis of seed 002's network (its §3.2): N users, each thinking for a
//! mean Z, then making one request of class c with probability `mix[c]`; the request's
//! service stages are visits to a processor-sharing web server (c servers: each of the n
//! requests there is served at rate min(n, c)/n), its delay stages visits to an
//! infinite-server delay centre. A product-form (BCMP) network with class switching inside
//! one closed chain: the stationary distribution, hence every mean, depends on the stages
//! only through each class's total demand at each station, so the chain is solved with the
//! mix-weighted demands and each class's response time follows from the arrival theorem —
//! a request arriving at the web server sees the network in equilibrium with N − 1 users.
//!
//! With one server that gives R_c(N) = D_c,ws · (1 + Q_ws(N − 1)) + D_c,delay. With c
//! servers the station is load dependent (rate min(n, c)); its marginal probabilities
//! p(j | n) for j < c − 1 are carried along, as in multi-server MVA:
//! R_c,ws(n) = D_c,ws / c · (1 + Q_ws(n − 1) + Σ_{j=0}^{c−2} (c − 1 − j) p(j | n − 1)).

use super::network::{mixed, Network, Solution};

/// Mean residual service of the visit in progress, as a share of its mean: ½ for the
/// constant service times of a handshake's steps (the same signature, the same key
/// schedule every time), where an exponential would be 1.
const RESIDUAL: f64 = 0.5;

/// One event loop, FCFS per visit, by the arrival-theorem approximation (Reiser's
/// for FCFS with class-dependent service): a visit arriving with N users waits for the
/// visits the N − 1 network has at the server, the one in progress only for its
/// residual: W(N) = X(N−1) · (W(N−1) · D_ws + RESIDUAL · Σ_c mix_c Σ_v S_cv²).
/// A request of class c waits V_c times: R_c = D_c,ws + V_c · W + D_c,delay.
/// Exact at N = 1 and at the saturation asymptotes; one processor only.
pub fn event_loop(net: &Network, users: &[u32]) -> Vec<Solution> {
    let max_users = users.last().copied().unwrap_or(0);
    let mut wanted = users.iter().peekable();
    let (d_ws, d_delay, z) = (net.service_demand(), net.delay_demand(), net.think_s);
    let sq = mixed(&net.mix, &net.visit_sq_s);
    let (mut wait, mut x) = (0.0, 0.0);
    let mut out = Vec::with_capacity(users.len());
    for n in 1..=max_users {
        wait = x * (wait * d_ws + RESIDUAL * sq);
        let class_web_server_s: [f64; 3] =
            std::array::from_fn(|k| net.service_s[k] + net.visits[k] * wait);
        let r_ws = mixed(&net.mix, &class_web_server_s);
        x = f64::from(n) / (z + r_ws + d_delay);
        if wanted.next_if_eq(&&n).is_none() {
            continue;
        }
        out.push(net.solution(n, x, class_web_server_s));
    }
    out
}

/// Processor sharing, exact (the module's recursion).
pub fn processor_sharing(net: &Network, users: &[u32]) -> Vec<Solution> {
    let max_users = users.last().copied().unwrap_or(0);
    let mut wanted = users.iter().peekable();
    let c = net.servers.max(1) as usize;
    let cf = c as f64;
    let (d_ws, d_delay, z) = (net.service_demand(), net.delay_demand(), net.think_s);
    // Q_ws(n − 1) and p(j | n − 1) for j < c, starting from the empty network
    let mut queue = 0.0;
    let mut p = vec![0.0; c];
    p[0] = 1.0;
    let mut out = Vec::with_capacity(users.len());
    for n in 1..=max_users {
        // what an arriving request sees: the N − 1 network
        let correction: f64 = (0..c.saturating_sub(1))
            .map(|j| (c - 1 - j) as f64 * p[j])
            .sum();
        let stretch = (1.0 + queue + correction) / cf;
        let r_ws = d_ws * stretch;
        let x = f64::from(n) / (z + r_ws + d_delay);
        queue = x * r_ws;
        // the marginals at n, from those at n − 1 (highest j first: p[j − 1] is still n − 1's)
        for j in (1..c).rev() {
            p[j] = d_ws * x * p[j - 1] / j as f64;
        }
        let busy: f64 = (1..c).map(|j| (c - j) as f64 * p[j]).sum();
        p[0] = ((cf - x * d_ws - busy) / cf).max(0.0);
        if wanted.next_if_eq(&&n).is_none() {
            continue;
        }
        out.push(net.solution(n, x, net.service_s.map(|d| d * stretch)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        ctmc::{self, Phase, Route},
        network::{Discipline, IdleCurve, Step},
        solve_at,
    };

    /// 1 ..= n users, by the network's discipline.
    fn solve(net: &Network, n: u32) -> Vec<Solution> {
        solve_at(net, &(1..=n).collect::<Vec<_>>())
    }

    /// Three classes whose stages alternate between the stations, as a TLS handshake's do.
    fn routes() -> Vec<Route> {
        let ws = |ms: f64| Phase {
            at_web_server: true,
            mean_s: ms * 1e-3,
        };
        let delay = |ms: f64| Phase {
            at_web_server: false,
            mean_s: ms * 1e-3,
        };
        vec![
            Route {
                share: 0.3,
                phases: vec![ws(2.0), delay(3.0), ws(9.0), delay(1.0), ws(1.5)],
            },
            Route {
                share: 0.5,
                phases: vec![ws(0.8), delay(2.5), ws(1.2)],
            },
            Route {
                share: 0.2,
                phases: vec![delay(0.4), ws(2.2)],
            },
        ]
    }

    fn network(routes: &[Route], think_s: f64, servers: u32) -> Network {
        let sum = |r: &Route, ws: bool| -> f64 {
            r.phases
                .iter()
                .filter(|p| p.at_web_server == ws)
                .map(|p| p.mean_s)
                .sum()
        };
        let pick = |ws: bool| [0, 1, 2].map(|c| sum(&routes[c], ws));
        let ws_phases = |c: usize| routes[c].phases.iter().filter(|p| p.at_web_server);
        Network {
            think_s,
            servers,
            mix: [0, 1, 2].map(|c| routes[c].share),
            service_s: pick(true),
            delay_s: pick(false),
            discipline: Discipline::ProcessorSharing,
            visits: [0, 1, 2].map(|c| ws_phases(c).count() as f64),
            visit_sq_s: [0, 1, 2].map(|c| ws_phases(c).map(|p| p.mean_s * p.mean_s).sum()),
            routes: [0, 1, 2].map(|c| {
                routes[c]
                    .phases
                    .iter()
                    .map(|p| match p.at_web_server {
                        true => Step::Visit {
                            queue: None,
                            service_s: p.mean_s,
                            cold: 0.0,
                            handshake: false,
                        },
                        false => Step::Delay { mean_s: p.mean_s },
                    })
                    .collect()
            }),
            seed: 1,
            overhead_s: 0.0,
            wakeup: IdleCurve::default(),
            sleep_cpu_s: 0.0,
            cpus_left: None,
            cold_start: Default::default(),
            cold_paid_s: [0.0; 3],
            overhead_cold: Default::default(),
        }
    }

    #[test]
    fn event_loop_bounds_and_one_user() {
        let ps = network(&routes(), 0.05, 1);
        let el = Network {
            discipline: Discipline::EventLoop,
            ..ps.clone()
        };
        let n = (100.0 * el.n_star()).ceil() as u32;
        let sol = solve(&el, n);
        // one user: no one to wait for
        assert_eq!(sol[0].response_s, el.demand());
        assert_eq!(sol[0].class_response_s, solve(&ps, 1)[0].class_response_s);
        // far past N*: the same asymptotes as any work-conserving server (approached
        // as 1/N, more slowly than with sharing)
        let last = sol.last().unwrap();
        let dmax = el.bottleneck_demand();
        assert!(close(last.throughput_per_s, 1.0 / dmax, 1e-3), "{last:?}");
        assert!(close(
            last.response_s,
            f64::from(n) * dmax - el.think_s,
            1e-3
        ));
        for s in &sol {
            let b = el.bounds(s.users);
            assert!(s.throughput_per_s <= b.throughput_max_per_s * (1.0 + 1e-12));
            assert!(s.response_s >= b.response_min_s * (1.0 - 1e-12));
        }
        // a short request waits behind a long one: worse than sharing for the class with
        // the most visits and the least work, at mid load
        let mid = (el.n_star() / 2.0).round() as usize;
        let (e, p) = (&sol[mid], &solve(&ps, mid as u32 + 1)[mid]);
        assert!(e.class_response_s[1] > p.class_response_s[1], "{e:?} {p:?}");
    }

    /// One class, one visit, exponential service: FCFS is product form and equals PS;
    /// with constant service the approximation must wait less (half the residual).
    #[test]
    fn event_loop_with_one_visit_is_near_ps() {
        let one = Network {
            think_s: 0.02,
            servers: 1,
            mix: [1.0, 0.0, 0.0],
            service_s: [0.004, 0.0, 0.0],
            delay_s: [0.001, 0.0, 0.0],
            discipline: Discipline::EventLoop,
            visits: [1.0, 0.0, 0.0],
            visit_sq_s: [0.004 * 0.004, 0.0, 0.0],
            routes: Default::default(),
            seed: 1,
            overhead_s: 0.0,
            wakeup: IdleCurve::default(),
            sleep_cpu_s: 0.0,
            cpus_left: None,
            cold_start: Default::default(),
            cold_paid_s: [0.0; 3],
            overhead_cold: Default::default(),
        };
        let ps = Network {
            discipline: Discipline::ProcessorSharing,
            ..one.clone()
        };
        for (e, p) in solve(&one, 30).iter().zip(&solve(&ps, 30)) {
            assert!(e.response_s <= p.response_s * (1.0 + 1e-12), "{e:?} {p:?}");
        }
    }

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * a.abs().max(b.abs()).max(1e-300)
    }

    #[test]
    fn one_user_sees_the_sum_of_its_stages() {
        for servers in [1, 2, 4] {
            let net = network(&routes(), 2.0, servers);
            let s = &solve(&net, 1)[0];
            assert_eq!(s.response_s, net.demand());
            for c in 0..3 {
                assert_eq!(
                    s.class_response_s[c],
                    net.service_s[c] + net.delay_s[c],
                    "class {c}"
                );
            }
            assert_eq!(s.throughput_per_s, 1.0 / (net.demand() + 2.0));
            assert_eq!(net.bounds(1).response_min_s, s.response_s);
        }
    }

    #[test]
    fn many_users_reach_the_asymptotes() {
        for servers in [1, 3] {
            let net = network(&routes(), 0.2, servers);
            let n = (10.0 * net.n_star()).ceil() as u32;
            let sol = solve(&net, n);
            let s = sol.last().unwrap();
            let dmax = net.bottleneck_demand();
            assert!(close(s.throughput_per_s, 1.0 / dmax, 1e-9), "{s:?}");
            let asymptote = f64::from(n) * dmax - net.think_s;
            assert!(close(s.response_s, asymptote, 1e-9), "{s:?} vs {asymptote}");
            assert!(close(s.utilisation, 1.0, 1e-9));
            // never past the bounds, and the mix's means add up
            for s in &sol {
                let b = net.bounds(s.users);
                assert!(s.throughput_per_s <= b.throughput_max_per_s * (1.0 + 1e-12));
                assert!(s.response_s >= b.response_min_s * (1.0 - 1e-12));
                let mean = mixed(&net.mix, &s.class_response_s);
                assert!(close(mean, s.response_s, 1e-12));
            }
        }
    }

    /// Per class, from the brute-force CTMC of the same network (every stage its own
    /// exponential phase, exponential think times), for N ≤ 4, by seed 002's eqs. (1)–(3):
    /// T_r = n̄_r · h / (n̄_0 · p_r) and T = (N − n̄_0) · h / n̄_0.
    #[test]
    fn agrees_with_the_ctmc_and_eqs_1_to_3() {
        let routes = routes();
        let think_s = 0.01; // short, so the web server is busy
        for servers in [1, 2] {
            let net = network(&routes, think_s, servers);
            let sol = solve(&net, 4);
            for n in 1..=4u32 {
                let pop = ctmc::solve(n, think_s, servers, &routes);
                let s = &sol[n as usize - 1];
                let h = think_s;
                let n0 = pop.thinking;
                // eq. (3)
                let t = (f64::from(n) - n0) * h / n0;
                assert!(close(t, s.response_s, 1e-9), "N={n} c={servers}: {t} {s:?}");
                for (c, route) in routes.iter().enumerate() {
                    let (ws, delay) = pop.class_users[c];
                    // eqs. (1), (2): per class
                    let t_c = (ws + delay) * h / (n0 * route.share);
                    assert!(
                        close(t_c, s.class_response_s[c], 1e-9),
                        "N={n} c={servers} class {c}: {t_c} vs {}",
                        s.class_response_s[c]
                    );
                    // and the MVA's own populations are the chain's
                    let (mva_ws, mva_delay) = s.class_users(&net, c);
                    assert!(close(mva_ws, ws, 1e-9), "N={n} class {c} ws");
                    assert!(close(mva_delay, delay, 1e-9), "N={n} class {c} delay");
                }
                assert!(close(s.thinking_users(&net), n0, 1e-9));
                assert!(close(
                    s.web_server_users,
                    pop.class_users.iter().map(|u| u.0).sum(),
                    1e-9
                ));
            }
        }
    }

    #[test]
    fn more_processors_never_hurt_and_one_behaves_like_one() {
        let one = solve(&network(&routes(), 0.05, 1), 60);
        let two = solve(&network(&routes(), 0.05, 2), 60);
        for (a, b) in one.iter().zip(&two) {
            assert!(b.response_s <= a.response_s * (1.0 + 1e-12), "{a:?} {b:?}");
            assert!(b.throughput_per_s >= a.throughput_per_s * (1.0 - 1e-12));
        }
        // one processor: R_ws(N) = D_ws (1 + Q(N − 1)), as the plain recursion says
        let net = network(&routes(), 0.05, 1);
        let mut q = 0.0;
        for s in &one {
            let r_ws = net.service_demand() * (1.0 + q);
            assert!(close(s.response_s, r_ws + net.delay_demand(), 1e-12));
            q = s.web_server_users;
        }
    }
}
