//! Plugin name and index validation.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use nri_api::{Error, check_plugin_index, check_plugin_name, parse_plugin_file_name};

#[test]
fn index_is_exactly_two_ascii_digits() {
    for ok in ["00", "10", "99"] {
        assert_eq!(check_plugin_index(ok), Ok(()), "{ok}");
    }
    for bad in ["", "1", "100", "1a", "a1", " 1", "١٢", "+1", "-1"] {
        assert_eq!(
            check_plugin_index(bad),
            Err(Error::InvalidPluginIndex { index: bad.into() }),
            "{bad:?}"
        );
    }
}

#[test]
fn name_charset() {
    for ok in ["logger", "a", "my_plugin.v2+x-y", "ABC123"] {
        assert_eq!(check_plugin_name(ok), Ok(()), "{ok}");
    }
    assert!(matches!(
        check_plugin_name(""),
        Err(Error::InvalidPluginName {
            reason: "empty",
            ..
        })
    ));
    for bad in ["a b", "a/b", "ä", "x:y", "tab\t", "semi;colon"] {
        assert!(
            matches!(check_plugin_name(bad), Err(Error::InvalidPluginName { ref name, .. }) if name == bad),
            "{bad:?}"
        );
    }
}

#[test]
fn file_names() {
    assert_eq!(parse_plugin_file_name("10-logger"), Ok(("10", "logger")));
    assert_eq!(
        parse_plugin_file_name("05-device-injector"),
        Ok(("05", "device-injector"))
    );
    for bad in [
        "logger",
        "1-logger",
        "100-logger",
        "ab-logger",
        "10-",
        "10-a b",
    ] {
        let err = parse_plugin_file_name(bad).unwrap_err();
        assert!(
            matches!(err, Error::InvalidPluginFileName { ref file_name, .. } if file_name == bad),
            "{bad:?}: {err}"
        );
        assert!(std::error::Error::source(&err).is_some());
    }
}
