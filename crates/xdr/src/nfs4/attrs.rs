//! File attributes (RFC 8881 §5, RFC 7862 §12.2): their numbers and a typed codec.
//!
//! A `fattr4` is a bitmap and an opaque byte string holding the XDR of each attribute whose bit is
//! set, in increasing bit order and with nothing in between:
//!
//! ```text
//!  mask  [ bit 1 | bit 4 | bit 33 ]          vals  | type (4) | size (8) | mode (4) |
//! ```
//!
//! Nothing says how long an attribute's value is, so a decoder can only walk the values while it
//! knows every attribute it meets. [`AttrValues::decode`] therefore stops at the first bit it has
//! no codec for and reports that bit and every later one as not decoded: the server answers
//! NFS4ERR_ATTRNOTSUPP for a SETATTR/OPEN/CREATE carrying them (RFC 8881 §18.30.3), while the
//! bits of a GETATTR *request* (a mask without values) that it does not know are simply left out
//! of the reply (§18.7.3). Encoding follows bit order exactly, which is what makes a reply
//! decodable at all; [`AttrValues::encode_masked`] encodes only the requested attributes.
//!
//! The attributes with codecs are the REQUIRED ones (RFC 8881 §5.6) and the RECOMMENDED ones a
//! Linux or FreeBSD client asks for (§5.7), plus the 4.2 ones Linux uses (`clone_blksize`,
//! `change_attr_type`, `mode_umask`, `xattr_support`). `fs_locations`, the retention and
//! threshold attributes, `sec_label` and the other rarely used ones have numbers here but no codec.

use super::{
    Bitmap4, Fattr4, Fsid4, Ftype4, NfsFh4, Nfsace4, Nfsstat4, Nfstime4, Settime4, Specdata4,
    Utf8Str, MAX_ARRAY,
};
use crate::{DecodeError, Pack, Reader, Result, Unpack, Writer};

/// Attribute numbers (RFC 5662 / RFC 7863; `mode_umask` RFC 8275, `xattr_support` RFC 8276).
pub mod num {
    pub const SUPPORTED_ATTRS: u32 = 0;
    pub const TYPE: u32 = 1;
    pub const FH_EXPIRE_TYPE: u32 = 2;
    pub const CHANGE: u32 = 3;
    pub const SIZE: u32 = 4;
    pub const LINK_SUPPORT: u32 = 5;
    pub const SYMLINK_SUPPORT: u32 = 6;
    pub const NAMED_ATTR: u32 = 7;
    pub const FSID: u32 = 8;
    pub const UNIQUE_HANDLES: u32 = 9;
    pub const LEASE_TIME: u32 = 10;
    pub const RDATTR_ERROR: u32 = 11;
    pub const ACL: u32 = 12;
    pub const ACLSUPPORT: u32 = 13;
    pub const ARCHIVE: u32 = 14;
    pub const CANSETTIME: u32 = 15;
    pub const CASE_INSENSITIVE: u32 = 16;
    pub const CASE_PRESERVING: u32 = 17;
    pub const CHOWN_RESTRICTED: u32 = 18;
    pub const FILEHANDLE: u32 = 19;
    pub const FILEID: u32 = 20;
    pub const FILES_AVAIL: u32 = 21;
    pub const FILES_FREE: u32 = 22;
    pub const FILES_TOTAL: u32 = 23;
    pub const FS_LOCATIONS: u32 = 24;
    pub const HIDDEN: u32 = 25;
    pub const HOMOGENEOUS: u32 = 26;
    pub const MAXFILESIZE: u32 = 27;
    pub const MAXLINK: u32 = 28;
    pub const MAXNAME: u32 = 29;
    pub const MAXREAD: u32 = 30;
    pub const MAXWRITE: u32 = 31;
    pub const MIMETYPE: u32 = 32;
    pub const MODE: u32 = 33;
    pub const NO_TRUNC: u32 = 34;
    pub const NUMLINKS: u32 = 35;
    pub const OWNER: u32 = 36;
    pub const OWNER_GROUP: u32 = 37;
    pub const QUOTA_AVAIL_HARD: u32 = 38;
    pub const QUOTA_AVAIL_SOFT: u32 = 39;
    pub const QUOTA_USED: u32 = 40;
    pub const RAWDEV: u32 = 41;
    pub const SPACE_AVAIL: u32 = 42;
    pub const SPACE_FREE: u32 = 43;
    pub const SPACE_TOTAL: u32 = 44;
    pub const SPACE_USED: u32 = 45;
    pub const SYSTEM: u32 = 46;
    pub const TIME_ACCESS: u32 = 47;
    pub const TIME_ACCESS_SET: u32 = 48;
    pub const TIME_BACKUP: u32 = 49;
    pub const TIME_CREATE: u32 = 50;
    pub const TIME_DELTA: u32 = 51;
    pub const TIME_METADATA: u32 = 52;
    pub const TIME_MODIFY: u32 = 53;
    pub const TIME_MODIFY_SET: u32 = 54;
    pub const MOUNTED_ON_FILEID: u32 = 55;
    pub const DIR_NOTIF_DELAY: u32 = 56;
    pub const DIRENT_NOTIF_DELAY: u32 = 57;
    pub const DACL: u32 = 58;
    pub const SACL: u32 = 59;
    pub const CHANGE_POLICY: u32 = 60;
    pub const FS_STATUS: u32 = 61;
    pub const FS_LAYOUT_TYPES: u32 = 62;
    pub const LAYOUT_HINT: u32 = 63;
    pub const LAYOUT_TYPES: u32 = 64;
    pub const LAYOUT_BLKSIZE: u32 = 65;
    pub const LAYOUT_ALIGNMENT: u32 = 66;
    pub const FS_LOCATIONS_INFO: u32 = 67;
    pub const MDSTHRESHOLD: u32 = 68;
    pub const RETENTION_GET: u32 = 69;
    pub const RETENTION_SET: u32 = 70;
    pub const RETENTEVT_GET: u32 = 71;
    pub const RETENTEVT_SET: u32 = 72;
    pub const RETENTION_HOLD: u32 = 73;
    pub const MODE_SET_MASKED: u32 = 74;
    pub const SUPPATTR_EXCLCREAT: u32 = 75;
    pub const FS_CHARSET_CAP: u32 = 76;
    pub const CLONE_BLKSIZE: u32 = 77;
    pub const SPACE_FREED: u32 = 78;
    pub const CHANGE_ATTR_TYPE: u32 = 79;
    pub const SEC_LABEL: u32 = 80;
    pub const MODE_UMASK: u32 = 81;
    pub const XATTR_SUPPORT: u32 = 82;
}

/// `fh_expire_type` bits (RFC 8881 §5.8.1.3).
pub const FH4_PERSISTENT: u32 = 0;
pub const FH4_NOEXPIRE_WITH_OPEN: u32 = 1;
pub const FH4_VOLATILE_ANY: u32 = 2;
pub const FH4_VOL_MIGRATION: u32 = 4;
pub const FH4_VOL_RENAME: u32 = 8;

/// `aclsupport` bits.
pub const ACL4_SUPPORT_ALLOW_ACL: u32 = 1;
pub const ACL4_SUPPORT_DENY_ACL: u32 = 2;
pub const ACL4_SUPPORT_AUDIT_ACL: u32 = 4;
pub const ACL4_SUPPORT_ALARM_ACL: u32 = 8;

/// `change_attr_type4` values (RFC 7862 §12.2.3).
pub const NFS4_CHANGE_TYPE_IS_MONOTONIC_INCR: u32 = 0;
pub const NFS4_CHANGE_TYPE_IS_VERSION_COUNTER: u32 = 1;
pub const NFS4_CHANGE_TYPE_IS_VERSION_COUNTER_NOPNFS: u32 = 2;
pub const NFS4_CHANGE_TYPE_IS_TIME_METADATA: u32 = 3;
pub const NFS4_CHANGE_TYPE_IS_UNDEFINED: u32 = 4;

xdr_struct!(
    /// `mode_masked4`: set only the mode bits in `mask_bits`.
    ModeMasked4 {
        value_to_set: u32,
        mask_bits: u32,
    }
);

xdr_struct!(
    /// `mode_umask4` (RFC 8275): a create mode and the umask the server applies when the parent
    /// has no inheritable ACL.
    ModeUmask4 { mode: u32, umask: u32 }
);

xdr_array!(
    /// `fattr4_acl`: `nfsace4<>`.
    Acl4(Nfsace4, "fattr4_acl", MAX_ARRAY)
);

xdr_array!(
    /// `layouttype4<>` as in `fs_layout_types`; kept as raw numbers.
    LayoutTypes4(u32, "layout types", 16)
);

/// What [`AttrValues::decode`] found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Decoded {
    pub values: AttrValues,
    /// The bits of the mask that were not decoded: the first one without a codec here and every
    /// bit after it (their values could not be located). Empty when everything was understood.
    pub undecoded: Bitmap4,
}

/// Declares [`AttrValues`]: one `Option` per attribute, in increasing attribute number.
macro_rules! attributes {
    ($($(#[$m:meta])* $num:ident => $field:ident : $ty:ty),* $(,)?) => {
        /// Typed attribute values; `None` means absent from the mask.
        #[derive(Debug, Clone, PartialEq, Eq, Default)]
        pub struct AttrValues {
            $($(#[$m])* pub $field: Option<$ty>,)*
        }

        impl AttrValues {
            /// The attribute numbers this codec understands, in increasing order.
            pub const KNOWN: &'static [u32] = &[$(num::$num),*];

            /// The mask of the attributes that are present.
            pub fn mask(&self) -> Bitmap4 {
                let mut b = Bitmap4::new();
                $(if self.$field.is_some() { b.set(num::$num); })*
                b
            }

            /// Encodes the present attributes whose bit is in `request` (all of them when
            /// `request` is `None`), in bit order.
            pub fn encode_masked(&self, request: Option<&Bitmap4>) -> Fattr4 {
                let mut mask = Bitmap4::new();
                let mut w = Writer::new();
                $(
                    if let Some(v) = &self.$field {
                        if request.is_none_or(|r| r.contains(num::$num)) {
                            mask.set(num::$num);
                            v.pack(&mut w);
                        }
                    }
                )*
                Fattr4 { mask, vals: w.into_bytes() }
            }

            fn decode_one(&mut self, bit: u32, r: &mut Reader<'_>) -> Result<bool> {
                match bit {
                    $(num::$num => self.$field = Some(<$ty>::unpack(r)?),)*
                    _ => return Ok(false),
                }
                Ok(true)
            }
        }

        #[cfg(test)]
        impl crate::nfs4::arb::Arb for AttrValues {
            fn arb(g: &mut crate::nfs4::arb::Gen) -> Self {
                Self { $($field: crate::nfs4::arb::Arb::arb(g),)* }
            }
        }
    };
}

attributes! {
    SUPPORTED_ATTRS => supported_attrs: Bitmap4,
    TYPE => ftype: Ftype4,
    FH_EXPIRE_TYPE => fh_expire_type: u32,
    CHANGE => change: u64,
    SIZE => size: u64,
    LINK_SUPPORT => link_support: bool,
    SYMLINK_SUPPORT => symlink_support: bool,
    NAMED_ATTR => named_attr: bool,
    FSID => fsid: Fsid4,
    UNIQUE_HANDLES => unique_handles: bool,
    /// Seconds.
    LEASE_TIME => lease_time: u32,
    RDATTR_ERROR => rdattr_error: Nfsstat4,
    ACL => acl: Acl4,
    ACLSUPPORT => aclsupport: u32,
    CANSETTIME => cansettime: bool,
    CASE_INSENSITIVE => case_insensitive: bool,
    CASE_PRESERVING => case_preserving: bool,
    CHOWN_RESTRICTED => chown_restricted: bool,
    FILEHANDLE => filehandle: NfsFh4,
    FILEID => fileid: u64,
    FILES_AVAIL => files_avail: u64,
    FILES_FREE => files_free: u64,
    FILES_TOTAL => files_total: u64,
    HOMOGENEOUS => homogeneous: bool,
    /// Bytes.
    MAXFILESIZE => maxfilesize: u64,
    MAXLINK => maxlink: u32,
    /// Bytes.
    MAXNAME => maxname: u32,
    /// Bytes.
    MAXREAD => maxread: u64,
    /// Bytes.
    MAXWRITE => maxwrite: u64,
    MODE => mode: u32,
    NO_TRUNC => no_trunc: bool,
    NUMLINKS => numlinks: u32,
    OWNER => owner: Utf8Str,
    OWNER_GROUP => owner_group: Utf8Str,
    RAWDEV => rawdev: Specdata4,
    /// Bytes.
    SPACE_AVAIL => space_avail: u64,
    /// Bytes.
    SPACE_FREE => space_free: u64,
    /// Bytes.
    SPACE_TOTAL => space_total: u64,
    /// Bytes.
    SPACE_USED => space_used: u64,
    TIME_ACCESS => time_access: Nfstime4,
    TIME_ACCESS_SET => time_access_set: Settime4,
    TIME_CREATE => time_create: Nfstime4,
    TIME_DELTA => time_delta: Nfstime4,
    TIME_METADATA => time_metadata: Nfstime4,
    TIME_MODIFY => time_modify: Nfstime4,
    TIME_MODIFY_SET => time_modify_set: Settime4,
    MOUNTED_ON_FILEID => mounted_on_fileid: u64,
    FS_LAYOUT_TYPES => fs_layout_types: LayoutTypes4,
    /// Bytes.
    LAYOUT_BLKSIZE => layout_blksize: u32,
    MODE_SET_MASKED => mode_set_masked: ModeMasked4,
    SUPPATTR_EXCLCREAT => suppattr_exclcreat: Bitmap4,
    /// Bytes.
    CLONE_BLKSIZE => clone_blksize: u32,
    /// Bytes (RFC 7862 §12.2.2: what removing the file would free).
    SPACE_FREED => space_freed: u64,
    CHANGE_ATTR_TYPE => change_attr_type: u32,
    MODE_UMASK => mode_umask: ModeUmask4,
    XATTR_SUPPORT => xattr_support: bool,
}

impl AttrValues {
    /// The attributes this codec understands, as a bitmap (a server intersects it with what its
    /// backend supports to answer `supported_attrs`).
    pub fn known_mask() -> Bitmap4 {
        Bitmap4::from_bits(Self::KNOWN)
    }

    /// Encodes every present attribute, in bit order.
    pub fn encode(&self) -> Fattr4 {
        self.encode_masked(None)
    }

    /// Decodes the values of `f`, walking its mask in increasing order.
    ///
    /// Stops at the first attribute without a codec (see the module notes); its bit and the later
    /// ones are returned in [`Decoded::undecoded`] and the bytes left are not looked at. A value
    /// that fails to decode, or bytes left over after the last decoded attribute when everything
    /// was understood, is a [`DecodeError`] (the server answers NFS4ERR_BADXDR).
    pub fn decode(f: &Fattr4) -> Result<Decoded> {
        let segs = [f.vals.clone()];
        let mut r = Reader::new(&segs);
        let mut out = Decoded::default();
        let mut stopped = false;
        for bit in f.mask.iter() {
            if !stopped && !out.values.decode_one(bit, &mut r)? {
                stopped = true;
            }
            if stopped {
                out.undecoded.set(bit);
            }
        }
        if !stopped && r.remaining() != 0 {
            return Err(DecodeError::Invalid("bytes after the last attribute value"));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs4::arb::{Arb, Gen};
    use bytes::Bytes;
    use proptest::prelude::*;

    #[test]
    fn known_numbers_are_increasing() {
        assert!(AttrValues::KNOWN.windows(2).all(|w| w[0] < w[1]));
        // The 14 REQUIRED attributes of 4.1 (RFC 8881 §5.6) all have codecs.
        for n in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 19, 75] {
            assert!(AttrValues::KNOWN.contains(&n), "REQUIRED attribute {n}");
        }
    }

    #[test]
    fn getattr_reply_golden_in_bit_order() {
        // type (1), size (4), mode (33): values travel in bit order whatever the field order.
        let v = AttrValues {
            mode: Some(0o644),
            size: Some(0x1_0000_0002),
            ftype: Some(Ftype4::REG),
            ..Default::default()
        };
        let f = v.encode();
        assert_eq!(f.mask.0, vec![(1 << 1) | (1 << 4), 1 << 1]);
        #[rustfmt::skip]
        let want: &[u8] = &[
            0, 0, 0, 1,                 // type NF4REG
            0, 0, 0, 1, 0, 0, 0, 2,     // size 0x1_0000_0002
            0, 0, 0x01, 0xa4,           // mode 0644
        ];
        assert_eq!(&f.vals[..], want);
        let d = AttrValues::decode(&f).unwrap();
        assert_eq!(d.values, v);
        assert!(d.undecoded.is_empty());
    }

    #[test]
    fn encode_masked_leaves_out_unrequested_and_unknown_bits() {
        let v = AttrValues {
            size: Some(7),
            mode: Some(0o600),
            ..Default::default()
        };
        // A request for size and for archive (14, no codec) and hidden (25): only size comes back.
        let req = Bitmap4::from_bits(&[num::SIZE, num::ARCHIVE, num::HIDDEN]);
        let f = v.encode_masked(Some(&req));
        assert!(f.mask.same_bits(&Bitmap4::from_bits(&[num::SIZE])));
        assert_eq!(&f.vals[..], &[0, 0, 0, 0, 0, 0, 0, 7]);
    }

    #[test]
    fn setattr_with_an_unknown_attribute_reports_it_and_the_rest() {
        // size (4) decodes; archive (14) has no codec, so archive and mode (33) are undecoded.
        let mut w = Writer::new();
        w.put_u64(9);
        w.put_bool(true);
        w.put_u32(0o755);
        let f = Fattr4 {
            mask: Bitmap4::from_bits(&[num::SIZE, num::ARCHIVE, num::MODE]),
            vals: w.into_bytes(),
        };
        let d = AttrValues::decode(&f).unwrap();
        assert_eq!(d.values.size, Some(9));
        assert_eq!(d.values.mode, None);
        assert_eq!(d.undecoded.iter().collect::<Vec<_>>(), vec![14, 33]);
    }

    #[test]
    fn short_or_long_values_are_errors() {
        let f = Fattr4 {
            mask: Bitmap4::from_bits(&[num::SIZE]),
            vals: Bytes::from_static(&[0, 0, 0, 1]),
        };
        assert_eq!(AttrValues::decode(&f), Err(DecodeError::Truncated));
        let f = Fattr4 {
            mask: Bitmap4::from_bits(&[num::MODE]),
            vals: Bytes::from_static(&[0, 0, 0, 1, 0, 0, 0, 0]),
        };
        assert!(matches!(
            AttrValues::decode(&f),
            Err(DecodeError::Invalid(_))
        ));
    }

    proptest! {
        #[test]
        fn attr_values_round_trip(seed in any::<u64>()) {
            let v = AttrValues::arb(&mut Gen::new(seed));
            let f = v.encode();
            let d = AttrValues::decode(&f).unwrap();
            prop_assert_eq!(&d.values, &v);
            prop_assert!(d.undecoded.is_empty());
            prop_assert!(f.mask.same_bits(&v.mask()));
        }

        #[test]
        fn arbitrary_values_never_panic(
            mask in proptest::collection::vec(any::<u32>(), 0..4),
            vals in proptest::collection::vec(any::<u8>(), 0..96),
        ) {
            let f = Fattr4 { mask: Bitmap4(mask), vals: Bytes::from(vals) };
            let _ = AttrValues::decode(&f);
        }
    }
}
