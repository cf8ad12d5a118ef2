//! The pseudo file system (RFC 8881 §7.3–§7.4): a read-only tree whose paths are the exports'
//! absolute paths, so that PUTROOTFH, LOOKUP by LOOKUP, reaches every export and `/` lists
//! down to each of them (knfsd's behaviour without an `fsid=0` export).
//!
//! ```text
//!  exports: /srv/a, /srv/b, /home          pseudo tree (fsid: pseudo)
//!                                           /
//!                                           ├── srv
//!                                           │   ├── a   ← export root (fsid of export 0)
//!                                           │   └── b   ← export root (fsid of export 1)
//!                                           └── home    ← export root (fsid of export 2)
//! ```
//! A node that is an export's path is where the pseudo tree hands over to the file-system
//! layer: LOOKUP of it answers [`Lookup::Export`] and the fsid changes there (§7.4). An export
//! inside another export (`/srv` and `/srv/a`) is below a hand-over point, so it is the file
//! system's to reach, not the pseudo tree's. LOOKUPP from an export root comes back here
//! through [`PseudoFs::parent_of_export`].
//!
//! Pseudo handles start with [`PSEUDO_HANDLE_TAG`], a byte export handles never start with
//! (theirs start with the handle layout version, 1), then the tree's generation and the node
//! index. A rebuilt tree (new export list) gets a new generation, so handles into the old tree
//! are NFS4ERR_STALE rather than pointing at a different directory.
//!
//! # The generation across restarts
//! Node indices follow the export list, so the server derives the generation from that list
//! ([`PseudoFs::generation_of`], a hash of the paths in order) rather than counting: a
//! restart with the same exports keeps every pseudo handle a client holds valid (the
//! handles are as persistent as `fh_expire_type` says), and a restart with other exports
//! makes them NFS4ERR_STALE, so that the client looks the path up again, instead of letting
//! an old index name another directory. The generation is also every pseudo directory's
//! change attribute: a client that cached a listing of `/` sees it change with the exports
//! and reads it again. (Two export lists hashing alike, 1 in 2^32, would keep stale handles
//! and listings until the next change; indices past the new tree's end are still STALE.)

use bytes::Bytes;
use sluice_xdr::nfs4::Fsid4;
use sluice_xdr::nfs4::Nfsstat4;

/// The `fsid` of every pseudo directory. Export fsids come from 32-bit export ids
/// (`sluice_vfs::ExportId`), so a major of 2^32 can never equal one: crossing from the pseudo
/// tree into an export always changes the fsid, as §7.4 requires of a file-system boundary.
pub const PSEUDO_FSID: Fsid4 = Fsid4 {
    major: 1 << 32,
    minor: 0,
};

/// First byte of every pseudo handle.
pub const PSEUDO_HANDLE_TAG: u8 = 0xf4;
const _: () = assert!(PSEUDO_HANDLE_TAG != sluice_vfs::handle::HANDLE_VERSION);
/// Pseudo handle length: tag, generation (4), node index (4).
pub const PSEUDO_HANDLE_BYTES: usize = 9;
/// Most nodes in the tree. Each export path adds at most its depth; 4096 covers hundreds of
/// deep exports and bounds a hostile export file.
pub const PSEUDO_NODES_MAX: usize = 4096;
/// Longest path component (NAME_MAX).
pub const NAME_BYTES_MAX: usize = 255;

/// A node of the tree.
pub type NodeId = u32;

/// Where a LOOKUP in the pseudo tree lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Another pseudo directory.
    Pseudo(NodeId),
    /// The root of export `n` (index in the list the tree was built from).
    Export(usize),
}

/// Why an export list does not make a tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PseudoError {
    NotAbsolute(String),
    BadComponent(String),
    TooManyNodes,
}

#[derive(Debug, Clone)]
struct Node {
    name: Bytes,
    parent: NodeId,
    /// Sorted by name.
    children: Vec<(Bytes, NodeId)>,
    export: Option<usize>,
}

/// The tree.
#[derive(Debug, Clone)]
pub struct PseudoFs {
    nodes: Vec<Node>,
    generation: u32,
}

impl PseudoFs {
    /// Builds the tree from the exports' absolute paths (`/` alone exports the root itself).
    /// `generation` tells this tree's handles from an earlier tree's.
    pub fn new<S: AsRef<str>>(export_paths: &[S], generation: u32) -> Result<Self, PseudoError> {
        let mut fs = Self {
            nodes: vec![Node {
                name: Bytes::new(),
                parent: 0,
                children: Vec::new(),
                export: None,
            }],
            generation,
        };
        for (i, path) in export_paths.iter().enumerate() {
            let path = path.as_ref();
            if !path.starts_with('/') {
                return Err(PseudoError::NotAbsolute(path.to_string()));
            }
            let mut at: NodeId = 0;
            for comp in path.split('/').filter(|c| !c.is_empty()) {
                if comp == "." || comp == ".." || comp.len() > NAME_BYTES_MAX {
                    return Err(PseudoError::BadComponent(path.to_string()));
                }
                at = fs.child_or_insert(at, comp.as_bytes())?;
            }
            let node = &mut fs.nodes[at as usize];
            node.export.get_or_insert(i);
        }
        // An export below another export's root is the file system's to reach: forget it here.
        // Parents precede their children in `nodes`, so one pass in order sees every ancestor.
        let mut below_export = vec![false; fs.nodes.len()];
        for i in 1..fs.nodes.len() {
            let p = fs.nodes[i].parent as usize;
            below_export[i] = below_export[p] || fs.nodes[p].export.is_some();
            if below_export[i] {
                fs.nodes[i].export = None;
            }
        }
        Ok(fs)
    }

    /// The root (PUTROOTFH). If `/` is itself exported, the caller hands over at once.
    pub fn root(&self) -> NodeId {
        0
    }

    /// The export whose root this node is, if any.
    pub fn export_at(&self, node: NodeId) -> Option<usize> {
        self.nodes.get(node as usize)?.export
    }

    /// LOOKUP of one component in a pseudo directory: NFS4ERR_NOENT when absent (the pseudo tree
    /// holds only the paths to exports).
    pub fn lookup(&self, dir: NodeId, name: &[u8]) -> Result<Lookup, Nfsstat4> {
        let d = self.node(dir)?;
        if d.export.is_some() {
            // Below a hand-over point the file system answers; asking us is the caller's bug.
            return Err(Nfsstat4::SERVERFAULT);
        }
        let i = d
            .children
            .binary_search_by(|(n, _)| n.as_ref().cmp(name))
            .map_err(|_| Nfsstat4::NOENT)?;
        let id = d.children[i].1;
        Ok(match self.nodes[id as usize].export {
            Some(e) => Lookup::Export(e),
            None => Lookup::Pseudo(id),
        })
    }

    /// LOOKUPP: the parent directory; NFS4ERR_NOENT at the root (§18.14.3).
    pub fn lookupp(&self, node: NodeId) -> Result<NodeId, Nfsstat4> {
        let n = self.node(node)?;
        if node == 0 {
            return Err(Nfsstat4::NOENT);
        }
        Ok(n.parent)
    }

    /// The pseudo directory holding export `e`'s root, for LOOKUPP from that root.
    pub fn parent_of_export(&self, e: usize) -> Option<NodeId> {
        let i = self.nodes.iter().position(|n| n.export == Some(e))?;
        (i != 0).then(|| self.nodes[i].parent)
    }

    /// READDIR of a pseudo directory: its children in name order, each with where it leads.
    pub fn readdir(&self, dir: NodeId) -> Result<Vec<(Bytes, Lookup)>, Nfsstat4> {
        let d = self.node(dir)?;
        Ok(d.children
            .iter()
            .map(|(name, id)| {
                let to = match self.nodes[*id as usize].export {
                    Some(e) => Lookup::Export(e),
                    None => Lookup::Pseudo(*id),
                };
                (name.clone(), to)
            })
            .collect())
    }

    /// The node where export `e`'s root is mounted in the tree, if it is reachable here (its
    /// fileid is the export root's `mounted_on_fileid`).
    pub fn node_of_export(&self, e: usize) -> Option<NodeId> {
        self.nodes
            .iter()
            .position(|n| n.export == Some(e))
            .map(|i| i as NodeId)
    }

    /// A node's name (empty for the root).
    pub fn name(&self, node: NodeId) -> Option<&[u8]> {
        self.nodes.get(node as usize).map(|n| n.name.as_ref())
    }

    /// The generation of the tree built from `export_paths` (module notes): FNV-1a (32 bits)
    /// over the paths in order, each followed by a 0 byte, which no path contains. FNV-1a
    /// because it is fixed by its definition, where std's hasher may change between Rust
    /// releases and so between builds of the server.
    pub fn generation_of<S: AsRef<str>>(export_paths: &[S]) -> u32 {
        const FNV_OFFSET: u32 = 0x811c_9dc5;
        const FNV_PRIME: u32 = 0x0100_0193;
        let mut h = FNV_OFFSET;
        for p in export_paths {
            for &b in p.as_ref().as_bytes().iter().chain(&[0u8]) {
                h = (h ^ u32::from(b)).wrapping_mul(FNV_PRIME);
            }
        }
        h
    }

    /// This tree's generation, which is also its directories' change attribute.
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// The handle of a pseudo node.
    pub fn handle(&self, node: NodeId) -> [u8; PSEUDO_HANDLE_BYTES] {
        let mut h = [0u8; PSEUDO_HANDLE_BYTES];
        h[0] = PSEUDO_HANDLE_TAG;
        h[1..5].copy_from_slice(&self.generation.to_be_bytes());
        h[5..9].copy_from_slice(&node.to_be_bytes());
        h
    }

    /// Whether a handle is a pseudo handle at all (as opposed to an export's).
    pub fn is_pseudo_handle(fh: &[u8]) -> bool {
        fh.first() == Some(&PSEUDO_HANDLE_TAG)
    }

    /// The node of a pseudo handle: NFS4ERR_BADHANDLE if malformed, NFS4ERR_STALE if from
    /// another tree or naming no node.
    pub fn from_handle(&self, fh: &[u8]) -> Result<NodeId, Nfsstat4> {
        if fh.len() != PSEUDO_HANDLE_BYTES || !Self::is_pseudo_handle(fh) {
            return Err(Nfsstat4::BADHANDLE);
        }
        let generation = u32::from_be_bytes(fh[1..5].try_into().expect("4 bytes"));
        let node = u32::from_be_bytes(fh[5..9].try_into().expect("4 bytes"));
        if generation != self.generation || node as usize >= self.nodes.len() {
            return Err(Nfsstat4::STALE);
        }
        Ok(node)
    }

    /// Nodes in the tree.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    fn node(&self, id: NodeId) -> Result<&Node, Nfsstat4> {
        self.nodes.get(id as usize).ok_or(Nfsstat4::STALE)
    }

    fn child_or_insert(&mut self, at: NodeId, name: &[u8]) -> Result<NodeId, PseudoError> {
        let children = &self.nodes[at as usize].children;
        match children.binary_search_by(|(n, _)| n.as_ref().cmp(name)) {
            Ok(i) => Ok(children[i].1),
            Err(i) => {
                if self.nodes.len() >= PSEUDO_NODES_MAX {
                    return Err(PseudoError::TooManyNodes);
                }
                let id = self.nodes.len() as NodeId;
                let name = Bytes::copy_from_slice(name);
                self.nodes.push(Node {
                    name: name.clone(),
                    parent: at,
                    children: Vec::new(),
                    export: None,
                });
                self.nodes[at as usize].children.insert(i, (name, id));
                Ok(id)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> PseudoFs {
        PseudoFs::new(&["/srv/b", "/srv/a/", "/home", "/srv/a/inner"], 5).unwrap()
    }

    #[test]
    fn lookup_walks_down_to_each_export() {
        let t = tree();
        let Lookup::Pseudo(srv) = t.lookup(t.root(), b"srv").unwrap() else {
            panic!("srv is a pseudo directory")
        };
        assert_eq!(t.lookup(srv, b"a"), Ok(Lookup::Export(1)));
        assert_eq!(t.lookup(srv, b"b"), Ok(Lookup::Export(0)));
        assert_eq!(t.lookup(t.root(), b"home"), Ok(Lookup::Export(2)));
        assert_eq!(t.lookup(srv, b"c"), Err(Nfsstat4::NOENT));
        assert_eq!(t.lookup(t.root(), b"sr"), Err(Nfsstat4::NOENT));
        assert_eq!(t.name(srv), Some(&b"srv"[..]));
    }

    /// The same export list makes the same generation on every start, so a client's pseudo
    /// handles survive a restart; another list makes handles of the old tree STALE.
    #[test]
    fn the_generation_follows_the_export_list() {
        let a = ["/srv/a", "/srv/b"];
        assert_eq!(PseudoFs::generation_of(&a), PseudoFs::generation_of(&a));
        for other in [
            &["/srv/b", "/srv/a"][..],
            &["/srv/a"],
            &["/srv/a", "/srv/b", "/x"],
        ] {
            assert_ne!(PseudoFs::generation_of(&a), PseudoFs::generation_of(other));
        }
        // No path can be confused with two: the separator is in the hash.
        assert_ne!(
            PseudoFs::generation_of(&["/ab"]),
            PseudoFs::generation_of(&["/a", "b"])
        );
        let old = PseudoFs::new(&a, PseudoFs::generation_of(&a)).unwrap();
        let again = PseudoFs::new(&a, PseudoFs::generation_of(&a)).unwrap();
        let srv = match old.lookup(old.root(), b"srv").unwrap() {
            Lookup::Pseudo(n) => n,
            other => panic!("{other:?}"),
        };
        assert_eq!(again.from_handle(&old.handle(srv)), Ok(srv));
        let b = ["/srv/b", "/home"];
        let changed = PseudoFs::new(&b, PseudoFs::generation_of(&b)).unwrap();
        assert_eq!(changed.from_handle(&old.handle(srv)), Err(Nfsstat4::STALE));
    }

    #[test]
    fn readdir_lists_children_in_order() {
        let t = tree();
        let names: Vec<_> = t
            .readdir(t.root())
            .unwrap()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(
            names,
            vec![Bytes::from_static(b"home"), Bytes::from_static(b"srv")]
        );
        let Lookup::Pseudo(srv) = t.lookup(t.root(), b"srv").unwrap() else {
            panic!()
        };
        assert_eq!(
            t.readdir(srv).unwrap(),
            vec![
                (Bytes::from_static(b"a"), Lookup::Export(1)),
                (Bytes::from_static(b"b"), Lookup::Export(0)),
            ]
        );
    }

    #[test]
    fn lookupp_climbs_and_stops_at_the_root() {
        let t = tree();
        let Lookup::Pseudo(srv) = t.lookup(t.root(), b"srv").unwrap() else {
            panic!()
        };
        assert_eq!(t.lookupp(srv), Ok(t.root()));
        assert_eq!(t.lookupp(t.root()), Err(Nfsstat4::NOENT));
        assert_eq!(t.parent_of_export(1), Some(srv));
        assert_eq!(t.parent_of_export(2), Some(t.root()));
        assert_eq!(
            t.parent_of_export(3),
            None,
            "nested under export 1: not in the tree"
        );
    }

    proptest::proptest! {
        /// Any export list: building never panics, and every export whose path has no other
        /// export above it is reached from the root by LOOKUPs of its components, with
        /// LOOKUPP leading back up the same way.
        #[test]
        fn every_top_level_export_is_reachable(
            paths in proptest::collection::vec(
                proptest::collection::vec("[a-c]{1,2}", 0..4), 0..12)
        ) {
            let paths: Vec<String> = paths.iter().map(|c| format!("/{}", c.join("/"))).collect();
            let t = PseudoFs::new(&paths, 1).unwrap();
            proptest::prop_assert!(t.len() <= PSEUDO_NODES_MAX);
            for (i, path) in paths.iter().enumerate() {
                let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
                let first = paths.iter().position(|p| p == path).unwrap();
                let covered = (0..comps.len()).any(|n| {
                    let above = format!("/{}", comps[..n].join("/"));
                    paths.contains(&above)
                });
                if covered || first != i {
                    continue;
                }
                if comps.is_empty() {
                    proptest::prop_assert_eq!(t.export_at(t.root()), Some(i));
                    continue;
                }
                let mut at = t.root();
                let mut trail = vec![];
                for (k, c) in comps.iter().enumerate() {
                    trail.push(at);
                    match t.lookup(at, c.as_bytes()) {
                        Ok(Lookup::Pseudo(n)) => at = n,
                        Ok(Lookup::Export(e)) => {
                            proptest::prop_assert_eq!(k, comps.len() - 1);
                            proptest::prop_assert_eq!(e, i);
                        }
                        Err(e) => proptest::prop_assert!(false, "{path}: {c}: {e:?}"),
                    }
                }
                let mut up = t.parent_of_export(i).unwrap();
                while let Some(expected) = trail.pop() {
                    proptest::prop_assert_eq!(up, expected);
                    up = t.lookupp(up).unwrap_or(up);
                }
            }
        }
    }

    #[test]
    fn the_pseudo_fsid_is_out_of_reach_of_export_ids() {
        let biggest_export = sluice_vfs::ExportId(u32::MAX).0 as u64;
        assert!(PSEUDO_FSID.major > biggest_export);
    }

    #[test]
    fn handles_are_tagged_and_go_stale_with_the_tree() {
        let t = tree();
        let h = t.handle(1);
        assert!(PseudoFs::is_pseudo_handle(&h));
        assert!(!PseudoFs::is_pseudo_handle(&[
            sluice_vfs::handle::HANDLE_VERSION,
            0,
            0
        ]));
        assert_eq!(t.from_handle(&h), Ok(1));
        let t2 = PseudoFs::new(&["/x"], 6).unwrap();
        assert_eq!(t2.from_handle(&h), Err(Nfsstat4::STALE));
        assert_eq!(t.from_handle(&h[..5]), Err(Nfsstat4::BADHANDLE));
        let mut far = h;
        far[8] = 200;
        assert_eq!(t.from_handle(&far), Err(Nfsstat4::STALE));
    }

    #[test]
    fn the_root_can_be_an_export_and_bad_paths_are_refused() {
        let t = PseudoFs::new(&["/"], 1).unwrap();
        assert_eq!(t.export_at(t.root()), Some(0));
        assert!(matches!(
            PseudoFs::new(&["srv"], 1),
            Err(PseudoError::NotAbsolute(_))
        ));
        assert!(matches!(
            PseudoFs::new(&["/srv/../etc"], 1),
            Err(PseudoError::BadComponent(_))
        ));
        let many: Vec<String> = (0..PSEUDO_NODES_MAX).map(|i| format!("/e{i}")).collect();
        assert_eq!(
            PseudoFs::new(&many, 1).err(),
            Some(PseudoError::TooManyNodes)
        );
    }
}
