//! The asynchronous COPY driver (RFC 7862 §15.2): the thin task that does the copies the
//! COMPOUND handed off (see `nfs4::compound::v42` for when, [`sluice_nfs4state::offload`] for
//! the table and the `CopySpawner` seam).
//!
//! ```text
//!   COPY (async) ─▶ State4::start_copy ─▶ copy stateid ─▶ reply at once
//!        └─ Nfs4::copy_spawner(job) ─▶ this task ─▶ a task per copy:
//!              loop: State4::copy_progress(copied)? ─no─▶ stop (cancelled / client gone)
//!                    FileSystem::copy_range (≤ 32 MiB, on the blocking pool) ─▶ copied += n
//!              end:  State4::finish_copy ─▶ CB_OFFLOAD queued on the back channel
//! ```
//! One chunk at a time per copy, each a `copy_file_range` of at most
//! [`sluice_vfs::COPY_BYTES_MAX`]: a cancel takes effect within one chunk (10-30 ms at page
//! cache speed), and a blocking-pool thread is never held longer than a synchronous COPY holds
//! it. The copies are bounded by the table ([`COPIES_MAX`](sluice_nfs4state::offload::COPIES_MAX)), so the tasks are.

use crate::nfs4::compound::Nfs4;
use crate::nfs4::map;
use sluice_nfs4state::offload::{CopyEnd, CopyJob, CopySpawner};
use sluice_xdr::nfs4::Nfsstat4;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Does `nfs4`'s asynchronous copies, for as long as the server runs. Until this runs (and in
/// tests without it) every COPY is synchronous.
pub async fn drive(nfs4: Arc<Nfs4>) -> std::io::Result<()> {
    let (tx, mut rx) = mpsc::unbounded_channel::<CopyJob>();
    let spawner: Box<dyn CopySpawner> = Box::new(move |job| tx.send(job).is_ok());
    if nfs4.copy_spawner.set(spawner).is_err() {
        // The same service served again: the first driver's channel stays in place, and
        // while that driver is gone every COPY is synchronous (the spawner says so).
        tracing::warn!("a second copy driver for one service: COPYs stay with the first");
        return std::future::pending().await;
    }
    while let Some(job) = rx.recv().await {
        tokio::spawn(run(nfs4.clone(), job));
    }
    Ok(())
}

/// The state's lock, handing released backend locks to the file systems when let go (a
/// callback's outcome or a copy's end can expire a client).
fn lock(nfs4: &Nfs4) -> crate::nfs4::compound::StateGuard<'_> {
    nfs4.state()
}

/// One copy, chunk by chunk (module notes).
pub(crate) async fn run(nfs4: Arc<Nfs4>, job: CopyJob) {
    let job = Arc::new(job);
    let mut copied = job.done;
    let status = loop {
        if copied >= job.count {
            break Nfsstat4::OK;
        }
        if !lock(&nfs4).copy_progress(&job.id, copied) {
            tracing::debug!(copied, "asynchronous copy cancelled");
            return;
        }
        let ask = job.count - copied;
        let j = job.clone();
        // The error's attributes are of no use here: only its kind goes back.
        let r = tokio::task::spawn_blocking(move || {
            j.fs.copy_range(
                &j.caller,
                &j.src,
                j.src_offset.saturating_add(copied),
                &j.dst,
                j.dst_offset.saturating_add(copied),
                ask,
            )
            .map(|ok| ok.count)
            .map_err(|(e, _)| e)
        })
        .await;
        match r {
            Ok(Ok(0)) => break Nfsstat4::OK,
            Ok(Ok(n)) => copied += n,
            // The source shrank under the copy: what was there is copied.
            Ok(Err(crate::backend::FsError::Inval)) if copied > 0 => break Nfsstat4::OK,
            Ok(Err(e)) => break map::status(e),
            Err(_) => break Nfsstat4::SERVERFAULT,
        }
    };
    let verifier = job.fs.write_verifier();
    let sent = lock(&nfs4).finish_copy(&job.id, CopyEnd { copied, status }, verifier);
    if sent {
        nfs4.copy_offloads_sent
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    tracing::debug!(copied, ?status, sent, "asynchronous copy done");
}
