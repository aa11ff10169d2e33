//! The processes found unable to take uprobes (no libssl with `SSL_do_handshake`, or
//! uprobes that tied nothing), each with the program it ran then, so that one is looked
//! at again only once it has exec'd another; and the programs already said to have no
//! libssl, so that each is said once, not once per process.
//!
//! The race this keeps right: a master with no libssl (Postfix's) forks a child that
//! execs its own program (smtpd, which links libssl.so.3). The fork is seen at once,
//! while the child still runs the master's program, so its first look fails. Were that
//! failure kept with the program the child runs when the failure is written down (by
//! then smtpd, the exec having come during the look), the rescan's "exec'd since" test
//! would never fire and the child would stay wire-only for good. So a newborn child's
//! failure is kept with no program at all (looked at again at the next rescan whatever
//! it runs), and any other failure with the program read *before* its look.

use std::{
    collections::{HashMap, HashSet},
    path::PathBuf,
};

/// What `/proc/PID/exe` named (none: unreadable, or not known).
pub type Program = Option<PathBuf>;

#[derive(Debug, Default)]
pub struct Unhooked {
    /// each process, with the program it ran when found unable (none: a newborn child)
    pids: HashMap<u32, Program>,
    /// programs said to have no libssl
    said: HashSet<Program>,
}

impl Unhooked {
    /// `pid` was found unable and is not to be looked at again yet.
    pub fn contains(&self, pid: u32) -> bool {
        self.pids.contains_key(&pid)
    }

    /// `pid` is gone.
    pub fn forget(&mut self, pid: u32) {
        self.pids.remove(&pid);
    }

    /// A child just forked failed its first look: it may be about to exec its program,
    /// so it is looked at again at the next rescan, whatever it runs then.
    pub fn newborn_failed(&mut self, pid: u32) {
        self.pids.insert(pid, None);
    }

    /// `pid` has no libssl in `program` (read before the look). True the first time
    /// that program is found so: the one time to say it.
    pub fn failed(&mut self, pid: u32, program: Program) -> bool {
        self.pids.insert(pid, program.clone());
        self.said.insert(program)
    }

    /// `pid`'s uprobes tied nothing: it stays wire-only while it runs `program`.
    pub fn untied(&mut self, pid: u32, program: Program) {
        self.pids.insert(pid, program);
    }

    /// `program` was already found without libssl (its symbols need not be read again
    /// for another process running it).
    pub fn said(&self, program: &Program) -> bool {
        self.said.contains(program)
    }

    /// At a rescan, `pid` runs `now`: true (and no longer held) if it has exec'd since
    /// it was found unable, or was a newborn child then; it is to be looked at again.
    pub fn exec_since(&mut self, pid: u32, now: &Program) -> bool {
        match self.pids.get(&pid) {
            Some(then) if then != now => {
                self.pids.remove(&pid);
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prog(p: &str) -> Program {
        Some(PathBuf::from(p))
    }

    #[test]
    fn a_newborn_child_is_looked_at_again_whatever_it_runs() {
        let mut u = Unhooked::default();
        // forked by a master without libssl; by the rescan it runs smtpd, or still the
        // master (the exec not yet done): either way it is looked at again
        u.newborn_failed(7);
        assert!(u.contains(7));
        assert!(u.exec_since(7, &prog("/usr/lib/postfix/sbin/smtpd")));
        assert!(!u.contains(7));
        u.newborn_failed(8);
        assert!(u.exec_since(8, &prog("/usr/lib/postfix/sbin/master")));
        // and a newborn's failure is not said: nothing is known of its program yet
        assert!(!u.said(&None));
    }

    #[test]
    fn a_failed_process_is_looked_at_again_only_after_an_exec() {
        let mut u = Unhooked::default();
        let master = prog("/usr/lib/postfix/sbin/master");
        assert!(u.failed(1, master.clone()));
        assert!(!u.exec_since(1, &master));
        assert!(u.contains(1));
        assert!(u.exec_since(1, &prog("/usr/sbin/nginx")));
        assert!(!u.contains(1));
        // a process gone is forgotten
        u.untied(2, prog("/usr/bin/node"));
        u.forget(2);
        assert!(!u.contains(2));
    }

    #[test]
    fn a_program_without_libssl_is_said_once() {
        let mut u = Unhooked::default();
        let gnutls = prog("/usr/sbin/exim4");
        // a server forking one child per connection: the first child's failure is said
        assert!(u.failed(10, gnutls.clone()));
        assert!(!u.failed(11, gnutls.clone()));
        assert!(!u.failed(12, gnutls.clone()));
        assert!(u.said(&gnutls));
        assert!(u.failed(13, prog("/usr/sbin/vsftpd")));
    }
}
