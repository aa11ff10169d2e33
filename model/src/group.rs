//! `--group`: what if every full handshake agreed on one key-exchange group (say every
//! client negotiated `X25519MLKEM768`)? The parameters measure each group's full handshakes
//! apart (`key_exchange`): that group's mean of each service stage, and of each delay stage
//! (the waits for the client, which hold the client's own key-share work: a hybrid client
//! makes its ML-KEM key before its ClientHello and decapsulates before its Finished),
//! replaces the full TLS class's, where it measured the stage. Parameters written before
//! the groups' delay stages have only their service stages: then the waits stay the
//! window's, and the report says so. The other classes and the mix do not change.

use std::borrow::Cow;

use anyhow::{anyhow, Result};

use crate::{
    input::{ClassInput, ServerInput},
    params::v1::GroupParams,
    stage::{RequestClass, StageClass},
};

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

/// What `--group` does to a full handshake: its service demand and its waits for the
/// client (its delay stages), each as measured (all groups) and with the group's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupDemand {
    pub service_s: (f64, f64),
    pub delay_s: (f64, f64),
    /// the group's delay stages were in the parameters; false in those written before
    /// them, where the waits stay as measured
    pub delays_by_group: bool,
}

/// A full handshake's demands as measured (all groups), and with `group`'s.
pub fn demand_s(server: &ServerInput, group: &str) -> Result<GroupDemand> {
    let full = &server.classes[RequestClass::TlsFull.index()];
    let with = with_group(server, Some(group))?;
    let total = |c: &ClassInput, class: StageClass| {
        c.stages
            .iter()
            .filter(|m| m.class == class)
            .map(|m| m.mean_s)
            .sum::<f64>()
    };
    let changed = &with.classes[RequestClass::TlsFull.index()];
    Ok(GroupDemand {
        service_s: (
            total(full, StageClass::Service),
            total(changed, StageClass::Service),
        ),
        delay_s: (
            total(full, StageClass::Delay),
            total(changed, StageClass::Delay),
        ),
        delays_by_group: measured(server, group)?.delay_stages.is_some(),
    })
}

/// `server`'s input with every full handshake on `group`: each service stage of the full
/// TLS class that the group measured takes its demand, as the input takes every stage's
/// (`input::demand_s`: the on-CPU time where it was read, else the wall mean), and each
/// delay stage the group measured its wall mean (where the parameters have the groups'
/// delay stages).
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
        let theirs = match m.class {
            StageClass::Service => Some(&g.stages),
            StageClass::Delay => g.delay_stages.as_ref(),
            StageClass::Queue => None,
        };
        if let Some(s) = theirs.and_then(|t| t.get(&m.name)) {
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
            delay_stages: None,
            delay_s: None,
        }
    }

    /// The full class's stage `name` in `s`.
    fn full_stage(s: &ServerInput, name: &str) -> f64 {
        s.classes[RequestClass::TlsFull.index()]
            .stages
            .iter()
            .find(|m| m.name == name)
            .unwrap_or_else(|| panic!("the seed's full handshakes have {name}"))
            .mean_s
    }

    /// With the groups' delay stages in the parameters, the group's waits for its client
    /// replace the full class's too (their wall means: a delay's CPU is not the server's),
    /// the stages it did not measure stay, and the demands say both.
    #[test]
    fn a_group_changes_the_full_handshakes_waits_it_measured() {
        let mut s = seed_parameters();
        let wait_request = full_stage(&s, Stage::WaitRequest.name());
        let (hello, flight_2) = (
            full_stage(&s, Stage::WaitClientHello.name()),
            full_stage(&s, Stage::WaitClientFlight2.name()),
        );
        let mut g = group("X25519MLKEM768", 1.5e-3);
        let wait = |mean_s| GroupStage {
            count: 10,
            mean_s,
            cpu_mean_s: Some(1e-6),
        };
        g.delay_stages = Some(Ordered(vec![
            (Stage::WaitClientHello.name().to_owned(), wait(4e-3)),
            (Stage::WaitClientFlight2.name().to_owned(), wait(20e-3)),
        ]));
        g.delay_s = Some(24e-3);
        s.key_exchange = vec![group("x25519", 0.9e-3), g];
        let changed = with_group(&s, Some("X25519MLKEM768")).unwrap();
        assert_eq!(full_stage(&changed, Stage::WaitClientHello.name()), 4e-3);
        assert_eq!(full_stage(&changed, Stage::WaitClientFlight2.name()), 20e-3);
        assert_eq!(
            full_stage(&changed, Stage::WaitRequest.name()),
            wait_request
        );
        assert_eq!(full_stage(&changed, Stage::ServerFlight1.name()), 1.5e-3);
        // the other classes keep theirs
        assert_eq!(
            changed.classes[RequestClass::Plain.index()],
            s.classes[RequestClass::Plain.index()]
        );
        let d = demand_s(&s, "X25519MLKEM768").unwrap();
        assert!(d.delays_by_group);
        assert!(
            (d.delay_s.1 - d.delay_s.0 - (4e-3 - hello) - (20e-3 - flight_2)).abs() < 1e-12,
            "{d:?}"
        );
    }

    /// Parameters written before the groups' delay stages: only the service stages move,
    /// and the demands say the waits are the window's.
    #[test]
    fn without_the_groups_delays_the_waits_stay_as_measured() {
        let mut s = seed_parameters();
        s.key_exchange = vec![group("X25519MLKEM768", 1.5e-3)];
        let d = demand_s(&s, "X25519MLKEM768").unwrap();
        assert!(!d.delays_by_group);
        assert_eq!(d.delay_s.0, d.delay_s.1);
        assert!(d.service_s.1 != d.service_s.0, "{d:?}");
        // an old document reads so: its groups carry no delay fields
        let text = include_str!("../../examples/seed002-parameters.json").replacen(
            "\"classes\"",
            "\"key_exchange\": [{\"group\": \"x25519\", \"count\": 3, \"share\": 1, \"stages\": {\"server_flight_1\": {\"count\": 3, \"mean_s\": 0.001, \"cpu_mean_s\": null}}, \"service_s\": 0.001}], \"classes\"",
            1,
        );
        let p = crate::params::v1::Parameters::from_json(&text, "old").unwrap();
        let g = &p.servers[0].key_exchange[0];
        assert_eq!((g.delay_stages.as_ref(), g.delay_s), (None, None));
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
        assert_eq!(full_stage(&changed, Stage::ServerFlight1.name()), 1.2e-3);
    }

    /// The group's first flight replaces the full class's; nothing else moves.
    #[test]
    fn a_group_changes_the_full_handshakes_service_stages_it_measured() {
        let mut s = seed_parameters();
        let flight_1 = full_stage(&s, Stage::ServerFlight1.name());
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
        let (now, then) = demand_s(&s, "X25519MLKEM768").unwrap().service_s;
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
