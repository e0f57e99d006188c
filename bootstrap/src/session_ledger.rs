//! The session ledger of a data directory: `sessions.next` holds, as 8 little-endian bytes,
//! the end of the session numbers reserved so far, replaced atomically (write, fsync,
//! rename, fsync of the directory) at every reservation.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::PathBuf;

use rill_application::ports::SessionLedger;

#[derive(Debug)]
pub struct FileLedger {
    dir: PathBuf,
}

impl FileLedger {
    const NAME: &'static str = "sessions.next";

    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }
}

impl SessionLedger for FileLedger {
    fn reserved(&self) -> io::Result<u64> {
        match fs::read(self.dir.join(Self::NAME)) {
            Ok(bytes) => {
                let bytes: [u8; 8] = bytes.try_into().map_err(|_| {
                    io::Error::new(io::ErrorKind::InvalidData, format!("{} is not 8 bytes long", Self::NAME))
                })?;
                Ok(u64::from_le_bytes(bytes))
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(1),
            Err(error) => Err(error),
        }
    }

    fn reserve(&self, end: u64) -> io::Result<()> {
        let temporary = self.dir.join(format!("{}.tmp", Self::NAME));
        let mut file = File::create(&temporary)?;
        file.write_all(&end.to_le_bytes())?;
        file.sync_all()?;
        fs::rename(&temporary, self.dir.join(Self::NAME))?;
        File::open(&self.dir)?.sync_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rill_application::login_guard::LoginGuard;
    use rill_application::shared::{SESSION_BLOCK, Sessions};

    fn sessions(dir: &std::path::Path) -> Sessions {
        Sessions::new(LoginGuard::new(0, 0), Box::new(FileLedger::new(dir))).unwrap()
    }

    #[test]
    fn no_session_number_comes_twice_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let first_run: Vec<u64> = {
            let sessions = sessions(dir.path());
            (0..5).map(|_| sessions.next_session().unwrap()).collect()
        };
        assert_eq!(first_run, [1, 2, 3, 4, 5]);
        let second_run = sessions(dir.path());
        let next = second_run.next_session().unwrap();
        assert!(next > 5, "a restart starts past every number the last run could hand out");
        assert_eq!(next, 1 + SESSION_BLOCK);
    }

    #[test]
    fn a_run_past_its_block_reserves_another_before_handing_it_out() {
        let dir = tempfile::tempdir().unwrap();
        let sessions = sessions(dir.path());
        let mut last = 0;
        for _ in 0..=SESSION_BLOCK {
            last = sessions.next_session().unwrap();
        }
        assert_eq!(last, 1 + SESSION_BLOCK);
        assert_eq!(FileLedger::new(dir.path()).reserved().unwrap(), 1 + 2 * SESSION_BLOCK);
    }
}
