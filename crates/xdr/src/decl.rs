//! The XDR declaration macros of every program: one family for MOUNT, NFSv3, NFSv4 and its
//! callbacks, so a wire type is declared the same way whichever protocol it belongs to.
//!
//! ```text
//!   xdr_struct!  struct x { a; b; }              fields in order
//!   xdr_enum!    enum x { A = 1, ... }           a u32 newtype with named constants: unknown
//!                                                values survive a round trip (rustls's way)
//!   xdr_union!   union x switch (d) { case .. }  a Rust enum; `default => Other` keeps an
//!                                                unknown discriminant, else it is BadDiscriminant
//!   xdr_bytes!   opaque x<max>                   a Bytes newtype with its decode bound
//!   xdr_array!   T x<max>                        a Vec newtype with its decode bound
//! ```
//!
//! Each declares the type and its [`Pack`](crate::Pack) and [`Unpack`](crate::Unpack), and, in
//! test builds, [`Arb`](crate::arb::Arb): an arbitrary value from a seeded generator, so a
//! round-trip property needs one strategy (a seed) for any declared type. A hand-written type
//! used as a field implements `Arb` beside its codec.
//!
//! NFSv4's result unions (`nfsstat4` with an OK arm and error arms that carry a body) are one
//! more shape built on the same traits, declared where that status lives (`nfs4::ops`,
//! `nfs4_res!`). The macros are textually scoped: `lib.rs` declares this module first.

/// A struct whose XDR form is its fields in order.
macro_rules! xdr_struct {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $field:ident : $ty:ty),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq, Default)]
        pub struct $name { $($(#[$fm])* pub $field: $ty),* }
        impl $crate::Pack for $name {
            #[allow(unused_variables)]
            fn pack(&self, w: &mut $crate::Writer) {
                $($crate::Pack::pack(&self.$field, w);)*
            }
        }
        impl $crate::Unpack for $name {
            #[allow(unused_variables)]
            fn unpack(r: &mut $crate::Reader<'_>) -> $crate::Result<Self> {
                Ok(Self { $($field: <$ty as $crate::Unpack>::unpack(r)?),* })
            }
        }
        #[cfg(test)]
        impl $crate::arb::Arb for $name {
            #[allow(unused_variables)]
            fn arb(g: &mut $crate::arb::Gen) -> Self {
                Self { $($field: $crate::arb::Arb::arb(g)),* }
            }
        }
    };
}

/// A 32-bit enum as a newtype with named constants and RFC names; unknown values survive.
macro_rules! xdr_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$cm:meta])* $c:ident = $v:expr => $s:expr),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
        pub struct $name(pub u32);
        impl $name {
            $($(#[$cm])* pub const $c: Self = Self($v);)*
            /// Every named value, in declaration order.
            pub const ALL: &'static [Self] = &[$(Self($v)),*];
            /// The RFC name, or "UNKNOWN".
            pub const fn name(self) -> &'static str {
                match self.0 {
                    $(x if x == $v => $s,)*
                    _ => "UNKNOWN",
                }
            }
        }
        impl $crate::Pack for $name {
            fn pack(&self, w: &mut $crate::Writer) {
                w.put_u32(self.0)
            }
        }
        impl $crate::Unpack for $name {
            fn unpack(r: &mut $crate::Reader<'_>) -> $crate::Result<Self> {
                Ok(Self(r.get_u32()?))
            }
        }
        #[cfg(test)]
        impl $crate::arb::Arb for $name {
            fn arb(g: &mut $crate::arb::Gen) -> Self {
                if g.below(8) == 0 {
                    Self(g.u32())
                } else {
                    Self::ALL[g.below(Self::ALL.len())]
                }
            }
        }
    };
}

/// Expands to its first argument; lets an optional `($ty)` in a macro bind a pattern variable.
macro_rules! xdr_bind {
    ($v:ident, $ty:ty) => {
        $v
    };
}

/// A discriminated union (`union x switch (u32-like d) { case A: T a; case B: void; ... }`) as a
/// Rust enum. With `default => Other`, discriminants without an arm decode to `Other(d)` with no
/// body (the RFC's `default: void`); without it they are [`DecodeError::BadDiscriminant`].
macro_rules! xdr_union {
    (@enum $(#[$m:meta])* $name:ident [$($other:ident)?] { $($(#[$vm:meta])* $disc:literal => $var:ident $(($ty:ty))?),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum $name {
            $($(#[$vm])* $var $(($ty))?,)*
            $(
                /// A discriminant with no arm of its own (the union's `default: void`).
                $other(u32),
            )?
        }
        impl $name {
            /// The discriminant this value encodes with.
            pub fn discriminant(&self) -> u32 {
                match self {
                    $(Self::$var $((xdr_bind!(_v, $ty)))? => ($disc).into(),)*
                    $(Self::$other(d) => *d,)?
                }
            }
        }
        impl $crate::Pack for $name {
            fn pack(&self, w: &mut $crate::Writer) {
                w.put_u32(self.discriminant());
                match self {
                    $(Self::$var $((xdr_bind!(v, $ty)))? => { $($crate::Pack::pack(xdr_bind!(v, $ty), w);)? })*
                    $(Self::$other(_) => {})?
                }
            }
        }
        #[cfg(test)]
        impl $crate::arb::Arb for $name {
            fn arb(g: &mut $crate::arb::Gen) -> Self {
                #[allow(unused_variables)]
                let choices: &[fn(&mut $crate::arb::Gen) -> Self] = &[
                    $(|g| Self::$var $(( <$ty as $crate::arb::Arb>::arb(g) ))?,)*
                    $(|_g| Self::$other(0x7fff_fff0),)?
                ];
                let i = g.below(choices.len());
                choices[i](g)
            }
        }
    };
    ($(#[$m:meta])* $name:ident ($what:expr) default => $other:ident { $($body:tt)* }) => {
        xdr_union!(@enum $(#[$m])* $name [$other] { $($body)* });
        xdr_union!(@unpack $name ($what) [$other] { $($body)* });
    };
    ($(#[$m:meta])* $name:ident ($what:expr) { $($body:tt)* }) => {
        xdr_union!(@enum $(#[$m])* $name [] { $($body)* });
        xdr_union!(@unpack $name ($what) [] { $($body)* });
    };
    (@unpack $name:ident ($what:expr) [$($other:ident)?] { $($(#[$vm:meta])* $disc:literal => $var:ident $(($ty:ty))?),* $(,)? }) => {
        impl $crate::Unpack for $name {
            fn unpack(r: &mut $crate::Reader<'_>) -> $crate::Result<Self> {
                let d = r.get_u32()?;
                $(
                    if d == u32::from($disc) {
                        return Ok(Self::$var $(( <$ty as $crate::Unpack>::unpack(r)? ))?);
                    }
                )*
                $(return Ok(Self::$other(d));)?
                #[allow(unreachable_code)]
                Err($crate::DecodeError::BadDiscriminant { what: $what, value: d })
            }
        }
    };
}

/// A byte string with a decode bound, as a newtype over [`Bytes`].
macro_rules! xdr_bytes {
    ($(#[$m:meta])* $name:ident ($what:expr, $max:expr)) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
        pub struct $name(pub ::bytes::Bytes);
        impl $name {
            /// The decode bound in bytes.
            pub const MAX_BYTES: usize = $max;
        }
        impl $crate::Pack for $name {
            fn pack(&self, w: &mut $crate::Writer) {
                debug_assert!(self.0.len() <= $max, "{} over its bound", $what);
                w.put_opaque(&self.0)
            }
        }
        impl $crate::Unpack for $name {
            fn unpack(r: &mut $crate::Reader<'_>) -> $crate::Result<Self> {
                Ok(Self(r.get_opaque($what, $max)?))
            }
        }
        impl From<&'static [u8]> for $name {
            fn from(b: &'static [u8]) -> Self {
                Self(::bytes::Bytes::from_static(b))
            }
        }
        impl std::ops::Deref for $name {
            type Target = [u8];
            fn deref(&self) -> &[u8] {
                &self.0
            }
        }
        #[cfg(test)]
        impl $crate::arb::Arb for $name {
            fn arb(g: &mut $crate::arb::Gen) -> Self {
                Self(g.bytes(($max as usize).min(24)))
            }
        }
    };
}

/// A counted array with a decode bound (`T x<max>`), as a newtype over `Vec<T>`.
macro_rules! xdr_array {
    ($(#[$m:meta])* $name:ident ($ty:ty, $what:expr, $max:expr)) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq, Default)]
        pub struct $name(pub Vec<$ty>);
        impl $crate::Pack for $name {
            fn pack(&self, w: &mut $crate::Writer) {
                w.put_array(&self.0)
            }
        }
        impl $crate::Unpack for $name {
            fn unpack(r: &mut $crate::Reader<'_>) -> $crate::Result<Self> {
                Ok(Self(r.get_array($what, $max)?))
            }
        }
        #[cfg(test)]
        impl $crate::arb::Arb for $name {
            fn arb(g: &mut $crate::arb::Gen) -> Self {
                let n = g.below(($max as usize).min(3) + 1);
                Self((0..n).map(|_| $crate::arb::Arb::arb(g)).collect())
            }
        }
    };
}
