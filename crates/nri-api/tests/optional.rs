//! Conversions of the Optional* wrappers.

use nri_api::api::{
    OptionalBool, OptionalFileMode, OptionalInt, OptionalInt32, OptionalRepeatedString,
    OptionalString, OptionalUInt32, OptionalUInt64,
};

#[test]
fn from_and_into() {
    assert_eq!(OptionalInt::from(-3).value, -3);
    assert_eq!(OptionalInt32::from(7).value, 7);
    assert_eq!(OptionalUInt32::from(7u32).value, 7);
    assert_eq!(OptionalUInt64::from(u64::MAX).value, u64::MAX);
    assert!(OptionalBool::from(true).value);
    assert_eq!(OptionalFileMode::from(0o644).value, 0o644);
    assert_eq!(OptionalString::from("x").value, "x");
    assert_eq!(OptionalString::from(String::from("y")).value, "y");
    let rs: OptionalRepeatedString = ["a", "b"].into_iter().collect();
    assert_eq!(rs.value, ["a", "b"]);
    let n: i64 = OptionalInt::from(9).into();
    assert_eq!(n, 9);
}

#[test]
fn some_and_get() {
    let field = OptionalInt::some(5);
    assert_eq!(OptionalInt::get(field.as_ref()), Some(5));
    assert_eq!(OptionalInt::get(None), None);
    assert_eq!(
        OptionalString::get(OptionalString::some("v").as_ref()).as_deref(),
        Some("v")
    );
}
