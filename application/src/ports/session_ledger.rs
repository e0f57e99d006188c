//! Where session numbers are reserved so that none is handed out twice, across restarts
//! included: a run hands out numbers only below the end it last reserved durably.

/// Durable record of the end of the reserved session numbers.
pub trait SessionLedger: Send + Sync {
    /// The end reserved by earlier runs (1 when none was): this run starts there.
    fn reserved(&self) -> std::io::Result<u64>;

    /// Records `end` durably before any number below it is handed out.
    fn reserve(&self, end: u64) -> std::io::Result<()>;
}

/// A ledger that keeps nothing: numbering starts at 1 in every run (tests and tools
/// whose sessions never outlive the process).
#[derive(Debug, Default)]
pub struct VolatileLedger;

impl SessionLedger for VolatileLedger {
    fn reserved(&self) -> std::io::Result<u64> {
        Ok(1)
    }

    fn reserve(&self, _end: u64) -> std::io::Result<()> {
        Ok(())
    }
}
