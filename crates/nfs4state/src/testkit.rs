//! Test support for every user of the state cores: the channel attributes a test session asks
//! for, written once. The state crate's own tests use it, and so does the server's session
//! test client (`sluice_server::testkit`, which turns this module on through the `testkit`
//! feature); production builds compile none of it.

use sluice_xdr::nfs4::ops::{ChannelAttrs4, RdmaIrd};

/// Channel attributes a test session asks for, each way: 1 MiB requests and replies, 16 ops,
/// `slots` slots, and 4 KiB cached replies: the Linux client's size for the reply cache, and
/// the server's cap ([`crate::Config4`]), so a test sees what a kernel mount sees.
pub fn channel_attrs(slots: u32) -> ChannelAttrs4 {
    ChannelAttrs4 {
        headerpadsize: 0,
        maxrequestsize: 1 << 20,
        maxresponsesize: 1 << 20,
        maxresponsesize_cached: 4096,
        maxoperations: 16,
        maxrequests: slots,
        rdma_ird: RdmaIrd(Vec::new()),
    }
}
