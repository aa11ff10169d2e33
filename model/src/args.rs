//! The model's option values, each bad one refused with one line saying what to give:
//! user counts, times, idle curves, fractions, factors, CPUs, `STAGE=K`.

use anyhow::{anyhow, bail, Result};

use super::network::IdleCurve;

/// Users beyond this are refused (the solver is O(N · c), the output a row per N).
pub const MAX_USERS: u32 = 1_000_000;
/// User counts reported at most.
pub const MAX_POINTS: usize = 100_000;

/// `1,10,50`, `1..400` (every integer), `1..400:10` (1, 11, …, 391 and 400), or a mix of
/// these; sorted, each once.
pub fn parse_users(s: &str) -> Result<Vec<u32>> {
    let bad = || {
        anyhow!("--users {s:?} is not a list of user counts: give e.g. 1,10,50 or 1..400 or 1..400:10 (from 1 to {MAX_USERS})")
    };
    let count = |t: &str| -> Result<u32> {
        let n: u32 = t.trim().parse().map_err(|_| bad())?;
        if n == 0 || n > MAX_USERS {
            return Err(bad());
        }
        Ok(n)
    };
    let mut out = Vec::new();
    for item in s.split(',') {
        match item.split_once("..") {
            None => out.push(count(item)?),
            Some((from, rest)) => {
                let (to, step) = match rest.split_once(':') {
                    Some((to, step)) => (to, count(step)?),
                    None => (rest, 1),
                };
                let (from, to) = (count(from)?, count(to)?);
                if to < from {
                    return Err(bad());
                }
                out.extend((from..=to).step_by(step as usize));
                out.push(to);
            }
        }
        if out.len() > MAX_POINTS {
            bail!("--users {s:?} asks for more than {MAX_POINTS} user counts: choose a step, e.g. 1..{MAX_USERS}:1000");
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// `2s`, `500ms`, `150us` or plain seconds (`2`, `0.5`): from 0 to a day.
pub fn parse_seconds(flag: &str, s: &str) -> Result<f64> {
    let t = s.trim();
    let (num, scale) = if let Some(us) = t.strip_suffix("us").or_else(|| t.strip_suffix("µs")) {
        (us, 1e-6)
    } else if let Some(ms) = t.strip_suffix("ms") {
        (ms, 1e-3)
    } else if let Some(sec) = t.strip_suffix('s') {
        (sec, 1.0)
    } else {
        (t, 1.0)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=86400.0).contains(&(v * scale)) => Ok(v * scale),
        _ => {
            bail!("{flag} {s:?} is not a time between 0 and a day: give e.g. {flag} 2s, 500ms or 2")
        }
    }
}

/// `--wakeup`, `--cold-start` (`flag`): one time (the same after any idle), or
/// `IDLE=TIME,...` (how long the worker had slept, or been away from the work, and the
/// time then), idle strictly ascending.
pub fn parse_idle_curve(flag: &str, s: &str) -> Result<IdleCurve> {
    if !s.contains('=') {
        return Ok(IdleCurve::constant(parse_seconds(flag, s)?));
    }
    let mut points: Vec<(f64, f64)> = Vec::new();
    for pair in s.split(',') {
        let Some((idle, time)) = pair.split_once('=') else {
            bail!("{flag} {s:?}: {pair:?} is not IDLE=TIME: give e.g. {flag} 1ms=50us,200ms=300us");
        };
        let idle = parse_seconds(flag, idle)?;
        let time = parse_seconds(flag, time)?;
        if points.last().is_some_and(|&(last, _)| idle <= last) {
            bail!("{flag} {s:?}: give the idle times in ascending order, each once");
        }
        points.push((idle, time));
    }
    Ok(IdleCurve::curve(points))
}

/// A fraction in [0, 1].
pub fn check_fraction(flag: &str, v: f64) -> Result<f64> {
    if !(0.0..=1.0).contains(&v) {
        bail!("{flag} {v} is not a fraction: give a number between 0 and 1");
    }
    Ok(v)
}

/// `0.1,0.2,0.3`: one curve per value.
pub fn parse_fractions(flag: &str, s: &str) -> Result<Vec<f64>> {
    s.split(',')
        .map(|t| {
            let v: f64 = t.trim().parse().map_err(|_| {
                anyhow!("{flag} {s:?} is not a list of fractions: give e.g. {flag} 0.1,0.2,0.3")
            })?;
            check_fraction(flag, v)
        })
        .collect()
}

/// A positive factor.
pub fn check_factor(flag: &str, v: f64) -> Result<f64> {
    if !v.is_finite() || v <= 0.0 {
        bail!("{flag} {v} is not a positive factor: give e.g. {flag} 2 (twice as fast) or 0.5");
    }
    Ok(v)
}

/// A count of CPUs' worth of work: finite, not negative.
pub fn check_cpus(flag: &str, v: f64) -> Result<f64> {
    if !v.is_finite() || v < 0.0 {
        bail!("{flag} {v} is not a number of CPUs: give e.g. {flag} 0.5 (half a CPU busy with other work) or 0");
    }
    Ok(v)
}

/// `STAGE=k`.
pub fn parse_scale(s: &str) -> Result<(String, f64)> {
    let (stage, k) = s.split_once('=').ok_or_else(|| {
        anyhow!(
            "--scale-stage {s:?} is not STAGE=FACTOR: give e.g. --scale-stage server_flight_2=4"
        )
    })?;
    let k: f64 = k.trim().parse().map_err(|_| {
        anyhow!("--scale-stage {s:?}: {k:?} is not a number: give e.g. --scale-stage {stage}=4")
    })?;
    // a stage's time × k: 0 is a stage that takes no time (a client that answers at once)
    if !k.is_finite() || k < 0.0 {
        bail!("--scale-stage {s:?}: {k} is not a factor of the stage's time: give e.g. --scale-stage {stage}=2 (twice as long), 0.5 (half), or 0 (no time at all)");
    }
    Ok((stage.trim().to_owned(), k))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_values() {
        assert_eq!(parse_users("50,1,10,10").unwrap(), [1, 10, 50]);
        assert_eq!(parse_users("1..4").unwrap(), [1, 2, 3, 4]);
        assert_eq!(parse_users("1..25:10,3").unwrap(), [1, 3, 11, 21, 25]);
        for bad in ["0", "x", "5..1", "1..10:0", "", "2000000"] {
            assert!(parse_users(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_seconds("--think-time", "2s").unwrap(), 2.0);
        assert_eq!(parse_seconds("--think-time", "500ms").unwrap(), 0.5);
        assert_eq!(parse_seconds("--think-time", "0.25").unwrap(), 0.25);
        assert!((parse_seconds("--overhead", "150us").unwrap() - 150e-6).abs() < 1e-18);
        assert!((parse_seconds("--wakeup", "80µs").unwrap() - 80e-6).abs() < 1e-18);
        let close = |got: &[(f64, f64)], want: &[(f64, f64)]| {
            got.len() == want.len()
                && got
                    .iter()
                    .zip(want)
                    .all(|(g, w)| (g.0 - w.0).abs() < 1e-15 && (g.1 - w.1).abs() < 1e-15)
        };
        assert!(close(
            parse_idle_curve("--wakeup", "80us").unwrap().points(),
            &[(0.0, 80e-6)]
        ));
        assert_eq!(
            parse_idle_curve("--wakeup", "0").unwrap(),
            IdleCurve::default()
        );
        let curve = parse_idle_curve("--wakeup", "1ms=50us, 200ms=0.3ms").unwrap();
        assert!(
            close(curve.points(), &[(1e-3, 50e-6), (0.2, 0.3e-3)]),
            "{curve:?}"
        );
        for (bad, says) in [
            ("200ms=1ms,1ms=50us", "ascending"),
            ("1ms=50us,1ms=60us", "ascending"),
            ("1ms=50us,200ms", "IDLE=TIME"),
            ("1ms=-5us", "between 0 and a day"),
        ] {
            let e = parse_idle_curve("--wakeup", bad).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains("--wakeup"), "{bad}: {e}");
        }
        assert!(parse_seconds("--think-time", "-1s").is_err());
        assert!(parse_seconds("--think-time", "2h").is_err());
        assert_eq!(parse_fractions("-p", "0.1, 0.3").unwrap(), [0.1, 0.3]);
        assert!(parse_fractions("-p", "1.5").is_err());
        assert_eq!(
            parse_scale("server_flight_2=4").unwrap(),
            ("server_flight_2".into(), 4.0)
        );
        assert_eq!(
            parse_scale("wait_client_hello=0").unwrap(),
            ("wait_client_hello".into(), 0.0)
        );
        for bad in ["server_flight_2=-1", "server_flight_2=inf"] {
            let e = parse_scale(bad).unwrap_err().to_string();
            assert!(e.contains("twice as long"), "{bad}: {e}");
        }
        assert!(parse_scale("server_flight_2").is_err());
    }
}
