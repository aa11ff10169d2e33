//! A record as the record path hands it to the OTLP recorder: what its labels and values
//! are made of, copied without allocating. An allocation here would cost the record path,
//! and its free on the recorder's thread (glibc frees across threads slowly) cost it
//! again: names are kept inline up to a length that covers them (a longer SNI goes to
//! the heap), stage times in fixed arrays.

use std::{borrow::Cow, sync::Arc};

use crate::{
    container::Container,
    metrics::pq_offered_label,
    record::Record,
    stage::{Kind, Resumption, Stage, Stages},
};

/// The longest SNI kept inline (so that the name takes 64 bytes); longer ones are
/// allocated.
const SNI_INLINE: usize = 62;
/// The most bytes of a process name (the kernel's TASK_COMM_LEN, its NUL not counted).
const COMM_INLINE: usize = 15;
/// A JA4 fingerprint's length (`t13d1516h2_8daaf6152771_02713d6af862`).
const JA4_INLINE: usize = 36;

pub(super) struct Conn {
    pub comm: Text<COMM_INLINE>,
    pub port: u16,
    pub container: Option<Arc<Container>>,
    pub kind: Kind,
    pub tls_version: Option<&'static str>,
    pub cipher: Option<Cow<'static, str>>,
    pub app: Option<&'static str>,
    pub sni: Option<Text<SNI_INLINE>>,
    pub offered: Option<Resumption>,
    pub resumption: Option<Resumption>,
    pub handshake_ns: Option<u64>,
    pub stages_ns: StageNs,
    pub cpu_ns: StageNs,
    pub failure: Option<(&'static str, Stage)>,
    /// the key exchange's group as the record names it (the recorder's thread makes
    /// the label of it, `metrics::group_label`)
    pub tls_group: Option<Cow<'static, str>>,
    pub pq_offered: &'static str,
    pub hrr_cause: Option<&'static str>,
    pub ja4: Option<Text<JA4_INLINE>>,
}

impl Conn {
    pub(super) fn of(r: &Record) -> Conn {
        Conn {
            comm: Text::new(&r.comm),
            port: r.local.port,
            container: r.container.clone(),
            kind: r.kind,
            tls_version: r.tls_version,
            cipher: r.cipher.clone(),
            app: r.app_protocol,
            sni: r.sni.as_deref().map(Text::new),
            offered: r.offered,
            resumption: r.resumption,
            handshake_ns: r.handshake_ns,
            stages_ns: StageNs::of(&r.stages_ns),
            cpu_ns: StageNs::of(&r.cpu_ns),
            failure: r.failure.zip(r.failed_in),
            tls_group: r.tls_group.clone(),
            pq_offered: pq_offered_label(r),
            hrr_cause: r.hrr_cause,
            ja4: r.ja4.as_deref().map(Text::new),
        }
    }
}

/// A string of up to `N` bytes kept inline; a longer one on the heap.
pub(super) enum Text<const N: usize> {
    Inline { len: u8, bytes: [u8; N] },
    Heap(Box<str>),
}

impl<const N: usize> Text<N> {
    const LEN_FITS: () = assert!(N <= u8::MAX as usize, "the inline length is a u8");

    pub fn new(s: &str) -> Self {
        let () = Self::LEN_FITS;
        if s.len() > N {
            return Text::Heap(s.into());
        }
        let mut bytes = [0; N];
        bytes[..s.len()].copy_from_slice(s.as_bytes());
        Text::Inline {
            len: s.len() as u8,
            bytes,
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Text::Inline { len, bytes } => {
                std::str::from_utf8(&bytes[..usize::from(*len)]).expect("copied from a str")
            }
            Text::Heap(s) => s,
        }
    }
}

/// Nanoseconds by stage: a record has each stage at most once (`stage::stages`, `cpu`).
#[derive(Clone, Copy)]
pub(super) struct StageNs {
    /// bit `i`: `Stage::ALL[i]` happened
    had: u32,
    ns: [u64; Stage::ALL.len()],
}

const _: () = assert!(Stage::ALL.len() <= u32::BITS as usize);

impl StageNs {
    fn of(stages: &Stages) -> StageNs {
        let mut out = StageNs {
            had: 0,
            ns: [0; Stage::ALL.len()],
        };
        for (stage, ns) in &stages.0 {
            let i = stage.index();
            debug_assert!(out.had & 1 << i == 0, "{stage:?} twice in a record");
            out.had |= 1 << i;
            out.ns[i] = *ns;
        }
        out
    }

    /// The stages that happened and their nanoseconds, in wire order.
    pub fn iter(&self) -> impl Iterator<Item = (Stage, u64)> + '_ {
        Stage::ALL
            .into_iter()
            .enumerate()
            .filter(|(i, _)| self.had & 1 << i != 0)
            .map(|(i, stage)| (stage, self.ns[i]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_keeps_short_strings_inline_and_long_ones_whole() {
        let short = Text::<15>::new("nginx");
        assert!(matches!(short, Text::Inline { len: 5, .. }));
        assert_eq!(short.as_str(), "nginx");
        assert_eq!(Text::<15>::new("").as_str(), "");
        let full = "a".repeat(15);
        assert!(matches!(Text::<15>::new(&full), Text::Inline { .. }));
        let long = format!("{}.example.com", "x".repeat(70));
        let t = Text::<SNI_INLINE>::new(&long);
        assert!(matches!(t, Text::Heap(_)));
        assert_eq!(t.as_str(), long);
        assert_eq!(Text::<8>::new("é-ü").as_str(), "é-ü");
    }

    #[test]
    fn stage_ns_gives_back_the_stages_in_wire_order() {
        let stages = Stages(vec![
            (Stage::AcceptQueue, 0),
            (Stage::ServerFlight1, 7),
            (Stage::Response, u64::MAX),
        ]);
        let got: Vec<_> = StageNs::of(&stages).iter().collect();
        assert_eq!(got, stages.0);
        assert_eq!(StageNs::of(&Stages::default()).iter().count(), 0);
    }

    #[test]
    fn a_conn_takes_64_bytes_for_its_sni() {
        assert_eq!(std::mem::size_of::<Option<Text<SNI_INLINE>>>(), 64);
    }
}
