//! COPY offload (RFC 7862 §15.2): the copy table and the `CopySpawner` seam of
//! [`sluice_nfs4state::offload`] (re-exported here, where the COMPOUND processor names them),
//! and the tokio [`driver`] that does the copies. The processor hands jobs to the spawner and
//! never names the driver, which imports the processor: `driver` is a child of this module, not
//! one of its imports, so no import cycle runs through here.

pub mod driver;

pub use sluice_nfs4state::offload::*;
