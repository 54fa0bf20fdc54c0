//! Conversions between plain values and the `Optional*` wrapper messages.
//!
//! The protocol marks an optional scalar by wrapping it in a message with a
//! single `value` field; an absent wrapper (`None`) means "not set".

use crate::api::{
    OptionalBool, OptionalFileMode, OptionalInt, OptionalInt32, OptionalInt64,
    OptionalRepeatedString, OptionalString, OptionalUInt32, OptionalUInt64,
};

macro_rules! optional_scalar {
    ($($wrapper:ident($ty:ty);)*) => {$(
        impl From<$ty> for $wrapper {
            fn from(value: $ty) -> Self {
                $wrapper { value }
            }
        }

        impl From<$wrapper> for $ty {
            fn from(w: $wrapper) -> Self {
                w.value
            }
        }

        impl $wrapper {
            /// Wraps `value`, ready for an optional message field.
            pub fn some(value: impl Into<$ty>) -> Option<Self> {
                Some($wrapper { value: value.into() })
            }

            /// The wrapped value of an optional field, if set.
            pub fn get(field: Option<&Self>) -> Option<$ty> {
                field.map(|w| w.value.clone())
            }
        }
    )*};
}

optional_scalar! {
    OptionalInt(i64);
    OptionalInt32(i32);
    OptionalUInt32(u32);
    OptionalInt64(i64);
    OptionalUInt64(u64);
    OptionalBool(bool);
    OptionalFileMode(u32);
    OptionalString(String);
    OptionalRepeatedString(Vec<String>);
}

impl From<&str> for OptionalString {
    fn from(value: &str) -> Self {
        OptionalString {
            value: value.to_owned(),
        }
    }
}

impl<S: Into<String>> FromIterator<S> for OptionalRepeatedString {
    fn from_iter<T: IntoIterator<Item = S>>(iter: T) -> Self {
        OptionalRepeatedString {
            value: iter.into_iter().map(Into::into).collect(),
        }
    }
}
