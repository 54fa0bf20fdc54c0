//! Go's number formatting where decoding depends on it: `strconv`'s
//! shortest `%g` of a float32 (how `sigs.k8s.io/yaml` turns a YAML float
//! into a string) and `encoding/json`'s float encoding (which decides
//! whether a YAML float decodes into a Go integer).

/// Decimal digits and exponent of the shortest representation that reads
/// back as the same value: `x = 0.d1d2d3... * 10^point`.
fn shortest_digits(exp_form: &str) -> (bool, String, i32) {
    // Rust's `{:e}` is the shortest round-trip form: `-1.2345e-7`.
    let (neg, rest) = match exp_form.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, exp_form),
    };
    let (mantissa, exp) = rest.split_once('e').unwrap_or((rest, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let digits = digits.trim_end_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    (neg, digits.to_owned(), exp + 1)
}

/// `%e` with all `digits`: `d.ddde±XX` (at least two exponent digits).
fn exp_format(neg: bool, digits: &str, point: i32) -> String {
    let mut s = String::new();
    if neg {
        s.push('-');
    }
    s.push_str(&digits[..1]);
    if digits.len() > 1 {
        s.push('.');
        s.push_str(&digits[1..]);
    }
    let e = point - 1;
    s.push('e');
    s.push(if e < 0 { '-' } else { '+' });
    s.push_str(&format!("{:02}", e.unsigned_abs()));
    s
}

/// `%f` with exactly the digits needed.
fn fixed_format(neg: bool, digits: &str, point: i32) -> String {
    let mut s = String::new();
    if neg {
        s.push('-');
    }
    let n = digits.len() as i32;
    if point <= 0 {
        s.push_str("0.");
        for _ in 0..(-point) {
            s.push('0');
        }
        s.push_str(digits);
    } else if point >= n {
        s.push_str(digits);
        for _ in 0..(point - n) {
            s.push('0');
        }
    } else {
        let (a, b) = digits.split_at(point as usize);
        s.push_str(a);
        s.push('.');
        s.push_str(b);
    }
    s
}

/// Go's `strconv.FormatFloat(v, 'g', -1, 32)`: `v` rounded to float32,
/// shortest digits, exponent form below 1e-4 and from 1e6 (`1e+06`).
pub(crate) fn format_g32(v: f64) -> String {
    let f = v as f32;
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if f == 0.0 {
        return if f.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    let (neg, digits, point) = shortest_digits(&format!("{f:e}"));
    let exp = point - 1;
    if !(-4..6).contains(&exp) {
        exp_format(neg, &digits, point)
    } else {
        fixed_format(neg, &digits, point)
    }
}

/// Go's `encoding/json` text of a float64: shortest digits, fixed notation
/// unless below 1e-6 or from 1e21 (`1e+21`, `1e-7`). `None` for NaN and
/// infinities, which Go refuses to encode.
pub(crate) fn format_json_float(v: f64) -> Option<String> {
    if !v.is_finite() {
        return None;
    }
    if v == 0.0 {
        return Some(if v.is_sign_negative() { "-0" } else { "0" }.into());
    }
    let abs = v.abs();
    let (neg, digits, point) = shortest_digits(&format!("{v:e}"));
    if !(1e-6..1e21).contains(&abs) {
        let s = exp_format(neg, &digits, point);
        // Go trims one leading zero of a negative exponent: e-07 -> e-7.
        Some(match s.rsplit_once("e-0") {
            Some((m, e)) if e.len() == 1 => format!("{m}e-{e}"),
            _ => s,
        })
    } else {
        Some(fixed_format(neg, &digits, point))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g32_like_go() {
        // Values from Go: fmt.Println(strconv.FormatFloat(v, 'g', -1, 32)).
        let cases = [
            (1.0, "1"),
            (1.5, "1.5"),
            (0.1, "0.1"),
            (100.0, "100"),
            (123456.0, "123456"),
            (1e6, "1e+06"),
            (1234567.0, "1.234567e+06"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.23456789, "1.2345679"),
            (-2.5, "-2.5"),
            (16777217.0, "1.6777216e+07"),
            (1e21, "1e+21"),
            (0.0, "0"),
        ];
        for (v, want) in cases {
            assert_eq!(format_g32(v), want, "{v}");
        }
        assert_eq!(format_g32(f64::INFINITY), "+Inf");
        assert_eq!(format_g32(f64::NAN), "NaN");
    }

    #[test]
    fn json_like_go() {
        // Values from Go: json.Marshal(v).
        let cases = [
            (1.0, "1"),
            (4096.0, "4096"),
            (10.0, "10"),
            (1.5, "1.5"),
            (0.1, "0.1"),
            (1e20, "100000000000000000000"),
            (1e21, "1e+21"),
            (1.5e22, "1.5e+22"),
            (0.000001, "0.000001"),
            (0.0000001, "1e-7"),
            (1.25e-10, "1.25e-10"),
            (-3.0, "-3"),
            (123456789.0, "123456789"),
        ];
        for (v, want) in cases {
            assert_eq!(format_json_float(v).as_deref(), Some(want), "{v}");
        }
        assert_eq!(format_json_float(f64::NAN), None);
    }
}
