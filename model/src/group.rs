//! `--group`: what if every full handshake agreed on one key-exchange group (say every
//! client negotiated `X25519MLKEM768`)? The parameters measure each group's full handshakes
//! apart (`key_exchange`): that group's mean of each service stage replaces the full TLS
//! class's, where it measured the stage. The waits, the other classes and the mix do not
//! change: the group changes what the server computes, not what the clients do.

use std::borrow::Cow;

use anyhow::{anyhow, Result};

use crate::{input::ServerInput, params::v1::GroupParams, stage::RequestClass};

/// The group's measured full handshakes on `server`, or why `--group` cannot use it.
pub fn measured<'a>(server: &'a ServerInput, group: &str) -> Result<&'a GroupParams> {
    server
        .key_exchange
        .iter()
        .find(|g| g.group.eq_ignore_ascii_case(group))
        .ok_or_else(|| {
            let seen: Vec<String> = server
                .key_exchange
                .iter()
                .map(|g| format!("{} ({})", g.group, g.count))
                .collect();
            match seen.is_empty() {
                true => anyhow!(
                    "--group {group}: the parameters of {} have no full handshakes by group (key_exchange): take them from `hstrace export` or a daemon (--from) of this version, for one port",
                    server.server
                ),
                false => anyhow!(
                    "--group {group}: {} measured no full handshake with it, only {}: measure clients that negotiate it first",
                    server.server,
                    seen.join(", ")
                ),
            }
        })
}

/// A full handshake's service demand as measured (all groups), and with `group`'s.
pub fn service_s(server: &ServerInput, group: &str) -> Result<(f64, f64)> {
    let full = &server.classes[RequestClass::TlsFull.index()];
    let with = with_group(server, Some(group))?;
    let total = |c: &crate::input::ClassInput| {
        c.stages
            .iter()
            .filter(|m| m.class == crate::stage::StageClass::Service)
            .map(|m| m.mean_s)
            .sum::<f64>()
    };
    Ok((
        total(full),
        total(&with.classes[RequestClass::TlsFull.index()]),
    ))
}

/// `server`'s input with every full handshake on `group`: each service stage of the full
/// TLS class that the group measured takes its demand, as the input takes every stage's
/// (`input::demand_s`: the on-CPU time where it was read, else the wall mean).
pub fn with_group<'a>(
    server: &'a ServerInput,
    group: Option<&str>,
) -> Result<Cow<'a, ServerInput>> {
    let Some(group) = group else {
        return Ok(Cow::Borrowed(server));
    };
    let g = measured(server, group)?;
    let mut changed = server.clone();
    for m in &mut changed.classes[RequestClass::TlsFull.index()].stages {
        if let Some((_, s)) = g.stages.0.iter().find(|(name, _)| *name == m.name) {
            m.mean_s = crate::input::demand_s(m.class, s.mean_s, s.cpu_mean_s);
        }
    }
    Ok(Cow::Owned(changed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{input::seed_parameters, ordered::Ordered, params::v1::GroupStage, stage::Stage};

    fn group(name: &str, flight_1_s: f64) -> GroupParams {
        GroupParams {
            group: name.into(),
            count: 10,
            share: 0.5,
            stages: Ordered(vec![(
                Stage::ServerFlight1.name().to_owned(),
                GroupStage {
                    count: 10,
                    mean_s: flight_1_s,
                    cpu_mean_s: None,
                },
            )]),
            service_s: flight_1_s,
        }
    }

    /// Where the group's on-CPU time was read, that is its stage's demand, as for every
    /// measured stage; the wall mean only where it was not.
    #[test]
    fn a_groups_demand_is_its_on_cpu_time_where_read() {
        let mut s = seed_parameters();
        let mut g = group("X25519MLKEM768", 2e-3);
        g.stages.0[0].1.cpu_mean_s = Some(1.2e-3);
        s.key_exchange = vec![g];
        let changed = with_group(&s, Some("X25519MLKEM768")).unwrap();
        let flight_1 = changed.classes[RequestClass::TlsFull.index()]
            .stages
            .iter()
            .find(|m| m.name == Stage::ServerFlight1.name())
            .unwrap();
        assert_eq!(flight_1.mean_s, 1.2e-3);
    }

    /// The group's first flight replaces the full class's; nothing else moves.
    #[test]
    fn a_group_changes_the_full_handshakes_service_stages_it_measured() {
        let mut s = seed_parameters();
        let full = RequestClass::TlsFull.index();
        let flight_1 = s.classes[full]
            .stages
            .iter()
            .find(|m| m.name == Stage::ServerFlight1.name())
            .expect("the seed's full handshakes have a first flight")
            .mean_s;
        s.key_exchange = vec![group("x25519", 0.9e-3), group("X25519MLKEM768", 1.5e-3)];
        let changed = with_group(&s, Some("x25519mlkem768")).unwrap();
        for (before, after) in s.classes.iter().zip(&changed.classes) {
            for (b, a) in before.stages.iter().zip(&after.stages) {
                let want = if before.class == RequestClass::TlsFull
                    && b.name == Stage::ServerFlight1.name()
                {
                    1.5e-3
                } else {
                    b.mean_s
                };
                assert_eq!(a.mean_s, want, "{} {}", before.class.name(), b.name);
            }
        }
        let (now, then) = service_s(&s, "X25519MLKEM768").unwrap();
        assert!(
            (then - now - (1.5e-3 - flight_1)).abs() < 1e-12,
            "{now} {then}"
        );
        assert!(matches!(with_group(&s, None).unwrap(), Cow::Borrowed(_)));
    }

    #[test]
    fn a_group_not_measured_is_refused_with_what_was() {
        let mut s = seed_parameters();
        let e = with_group(&s, Some("x25519")).unwrap_err().to_string();
        assert!(e.contains("no full handshakes by group"), "{e}");
        s.key_exchange = vec![group("x25519", 1e-3)];
        let e = with_group(&s, Some("SecP256r1MLKEM768"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("only x25519 (10)"), "{e}");
    }
}
