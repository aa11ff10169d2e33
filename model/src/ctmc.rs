//! A brute-force check of the MVA (tests only): the continuous-time Markov chain of the
//! same network with every stage its own exponential phase — N users, each thinking
//! (exponential, mean Z), then taking its class's phases in order, at the web server
//! (processor sharing over c processors: each of the n there is served at rate
//! min(n, c)/n) or at the delay centre (infinite server) — solved for its stationary
//! distribution by Gaussian elimination. Nothing here is shared with `mva`.

use std::collections::HashMap;

/// One stage of a class's route.
#[derive(Debug, Clone, Copy)]
pub struct Phase {
    pub at_web_server: bool,
    pub mean_s: f64,
}

/// A request class: the probability a request is of it, and its stages in order.
#[derive(Debug, Clone)]
pub struct Route {
    pub share: f64,
    pub phases: Vec<Phase>,
}

/// Stationary mean numbers of users.
#[derive(Debug)]
pub struct Populations {
    pub thinking: f64,
    /// per class: (at the web server, at the delay centre)
    pub class_users: Vec<(f64, f64)>,
}

/// Every way to put `n` users into `slots` places.
fn states(n: u32, slots: usize) -> Vec<Vec<u32>> {
    if slots == 1 {
        return vec![vec![n]];
    }
    let mut out = Vec::new();
    for first in 0..=n {
        for mut rest in states(n - first, slots - 1) {
            rest.insert(0, first);
            out.push(rest);
        }
    }
    out
}

/// Solve x · A = b for x with A square (row-major), by Gaussian elimination with partial
/// pivoting on Aᵀ.
fn solve_left(a: &[Vec<f64>], b: &[f64]) -> Vec<f64> {
    let n = b.len();
    // m = [Aᵀ | b]
    let mut m: Vec<Vec<f64>> = (0..n)
        .map(|i| {
            let mut row: Vec<f64> = (0..n).map(|j| a[j][i]).collect();
            row.push(b[i]);
            row
        })
        .collect();
    for col in 0..n {
        let pivot = (col..n)
            .max_by(|&x, &y| m[x][col].abs().total_cmp(&m[y][col].abs()))
            .expect("rows left");
        m.swap(col, pivot);
        let p = m[col][col];
        assert!(p.abs() > 1e-300, "singular chain");
        for r in col + 1..n {
            let f = m[r][col] / p;
            if f != 0.0 {
                let (top, bottom) = m.split_at_mut(r);
                for (x, y) in bottom[0][col..].iter_mut().zip(&top[col][col..]) {
                    *x -= f * y;
                }
            }
        }
    }
    let mut x = vec![0.0; n];
    for r in (0..n).rev() {
        let s: f64 = (r + 1..n).map(|j| m[r][j] * x[j]).sum();
        x[r] = (m[r][n] - s) / m[r][r];
    }
    x
}

/// The chain's stationary means for `n` users.
pub fn solve(n: u32, think_s: f64, servers: u32, routes: &[Route]) -> Populations {
    // slot 0: thinking; then each class's phases in order
    let mut slots = vec![(
        usize::MAX,
        Phase {
            at_web_server: false,
            mean_s: think_s,
        },
    )];
    for (c, r) in routes.iter().enumerate() {
        slots.extend(r.phases.iter().map(|p| (c, *p)));
    }
    let first_of: Vec<usize> = {
        let mut at = 1;
        routes
            .iter()
            .map(|r| {
                let f = at;
                at += r.phases.len();
                f
            })
            .collect()
    };
    let all = states(n, slots.len());
    let index: HashMap<&[u32], usize> = all.iter().enumerate().map(|(i, s)| (&s[..], i)).collect();
    let size = all.len();
    let mut q = vec![vec![0.0; size]; size];
    for (i, s) in all.iter().enumerate() {
        let at_ws: u32 = (1..slots.len())
            .filter(|&k| slots[k].1.at_web_server)
            .map(|k| s[k])
            .sum();
        let share_ws = if at_ws == 0 {
            0.0
        } else {
            f64::from(at_ws.min(servers)) / f64::from(at_ws)
        };
        let mut go = |from: usize, to: usize, rate: f64| {
            let mut t = s.clone();
            t[from] -= 1;
            t[to] += 1;
            let j = index[&t[..]];
            q[i][j] += rate;
            q[i][i] -= rate;
        };
        // a user ends its think time and makes a request of class c
        if s[0] > 0 {
            for (c, r) in routes.iter().enumerate() {
                if r.share > 0.0 {
                    go(0, first_of[c], f64::from(s[0]) / think_s * r.share);
                }
            }
        }
        for k in 1..slots.len() {
            if s[k] == 0 {
                continue;
            }
            let (c, phase) = slots[k];
            let per_user = if phase.at_web_server { share_ws } else { 1.0 };
            let rate = f64::from(s[k]) * per_user / phase.mean_s;
            let last = first_of[c] + routes[c].phases.len() - 1;
            go(k, if k == last { 0 } else { k + 1 }, rate);
        }
    }
    // π Q = 0 with Σ π = 1: the last balance equation replaced by the normalisation
    for row in q.iter_mut() {
        row[size - 1] = 1.0;
    }
    let mut b = vec![0.0; size];
    b[size - 1] = 1.0;
    let pi = solve_left(&q, &b);
    let mean = |k: usize| -> f64 { all.iter().zip(&pi).map(|(s, p)| f64::from(s[k]) * p).sum() };
    let class_users = (0..routes.len())
        .map(|c| {
            let mut ws = 0.0;
            let mut delay = 0.0;
            let first = first_of[c];
            for (k, slot) in slots
                .iter()
                .enumerate()
                .skip(first)
                .take(routes[c].phases.len())
            {
                if slot.1.at_web_server {
                    ws += mean(k);
                } else {
                    delay += mean(k);
                }
            }
            (ws, delay)
        })
        .collect();
    Populations {
        thinking: mean(0),
        class_users,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One user, one class: the chain is a cycle, time shares are the means.
    #[test]
    fn one_user_cycle() {
        let r = Route {
            share: 1.0,
            phases: vec![
                Phase {
                    at_web_server: true,
                    mean_s: 1.0,
                },
                Phase {
                    at_web_server: false,
                    mean_s: 3.0,
                },
            ],
        };
        let p = solve(1, 4.0, 1, &[r]);
        assert!((p.thinking - 0.5).abs() < 1e-12);
        assert!((p.class_users[0].0 - 0.125).abs() < 1e-12);
        assert!((p.class_users[0].1 - 0.375).abs() < 1e-12);
    }
}
