//! Numbers, as serde_json parses them (`parse_integer` and its helpers), including the
//! non-`float_roundtrip` float arithmetic, because an error message can quote the float.

use serde::de::Unexpected;

use super::{
    EOF_VALUE, INVALID_NUMBER, NUMBER_OUT_OF_RANGE, Parser, ScanError, invalid_type, invalid_value,
};

/// `serde_json::de::ParserNumber`.
pub(super) enum Number {
    F64(f64),
    U64(u64),
    I64(i64),
}

impl Number {
    pub(super) fn invalid_type(self, exp: &str) -> ScanError {
        match self {
            Number::F64(x) => invalid_type(Unexpected::Float(x), exp),
            Number::U64(x) => invalid_type(Unexpected::Unsigned(x), exp),
            Number::I64(x) => invalid_type(Unexpected::Signed(x), exp),
        }
    }

    /// serde's `i32` visitor.
    pub(super) fn into_i32(self) -> Result<i32, ScanError> {
        match self {
            Number::U64(v) => {
                i32::try_from(v).map_err(|_| invalid_value(Unexpected::Unsigned(v), "i32"))
            }
            Number::I64(v) => {
                i32::try_from(v).map_err(|_| invalid_value(Unexpected::Signed(v), "i32"))
            }
            Number::F64(v) => Err(invalid_type(Unexpected::Float(v), "i32")),
        }
    }
}

/// `10^i` as the literal `1e<i>` evaluates (serde_json's `POW10` table),
/// for `i` in `0..=308`.
fn pow10(i: usize) -> Option<f64> {
    (i <= 308).then(|| format!("1e{i}").parse::<f64>().unwrap_or(f64::NAN))
}

/// `significand * 10 + digit` would overflow `limit`.
fn overflows(significand: u64, digit: u64, limit: u64) -> bool {
    significand >= limit / 10 && (significand > limit / 10 || digit > limit % 10)
}

impl Parser<'_> {
    pub(super) fn parse_integer(&mut self, positive: bool) -> Result<Number, ScanError> {
        let Some(next) = self.src.next()? else {
            return Err(self.error(EOF_VALUE));
        };
        match next {
            b'0' => match self.peek_or_null()? {
                b'0'..=b'9' => Err(self.peek_error(INVALID_NUMBER)),
                _ => self.parse_number(positive, 0),
            },
            c @ b'1'..=b'9' => {
                let mut significand = u64::from(c - b'0');
                loop {
                    match self.peek_or_null()? {
                        c @ b'0'..=b'9' => {
                            let digit = u64::from(c - b'0');
                            if overflows(significand, digit, u64::MAX) {
                                return Ok(Number::F64(
                                    self.parse_long_integer(positive, significand)?,
                                ));
                            }
                            self.src.discard();
                            significand = significand * 10 + digit;
                        }
                        _ => return self.parse_number(positive, significand),
                    }
                }
            }
            _ => Err(self.error(INVALID_NUMBER)),
        }
    }

    fn parse_number(&mut self, positive: bool, significand: u64) -> Result<Number, ScanError> {
        Ok(match self.peek_or_null()? {
            b'.' => Number::F64(self.parse_decimal(positive, significand, 0)?),
            b'e' | b'E' => Number::F64(self.parse_exponent(positive, significand, 0)?),
            _ => {
                if positive {
                    Number::U64(significand)
                } else {
                    let neg = (significand as i64).wrapping_neg();
                    // A float on underflow, and on `-0`.
                    if neg >= 0 {
                        Number::F64(-(significand as f64))
                    } else {
                        Number::I64(neg)
                    }
                }
            }
        })
    }

    fn parse_decimal(
        &mut self,
        positive: bool,
        mut significand: u64,
        exponent_before: i32,
    ) -> Result<f64, ScanError> {
        self.src.discard();
        let mut exponent_after: i32 = 0;
        while let c @ b'0'..=b'9' = self.peek_or_null()? {
            let digit = u64::from(c - b'0');
            if overflows(significand, digit, u64::MAX) {
                let exponent = exponent_before.wrapping_add(exponent_after);
                return self.parse_decimal_overflow(positive, significand, exponent);
            }
            self.src.discard();
            significand = significand * 10 + digit;
            exponent_after = exponent_after.wrapping_sub(1);
        }
        if exponent_after == 0 {
            return Err(match self.src.peek()? {
                Some(_) => self.peek_error(INVALID_NUMBER),
                None => self.peek_error(EOF_VALUE),
            });
        }
        let exponent = exponent_before.wrapping_add(exponent_after);
        match self.peek_or_null()? {
            b'e' | b'E' => self.parse_exponent(positive, significand, exponent),
            _ => self.f64_from_parts(positive, significand, exponent),
        }
    }

    fn parse_exponent(
        &mut self,
        positive: bool,
        significand: u64,
        starting_exp: i32,
    ) -> Result<f64, ScanError> {
        self.src.discard();
        let positive_exp = match self.peek_or_null()? {
            b'+' => {
                self.src.discard();
                true
            }
            b'-' => {
                self.src.discard();
                false
            }
            _ => true,
        };
        let Some(next) = self.src.next()? else {
            return Err(self.error(EOF_VALUE));
        };
        let mut exp = match next {
            c @ b'0'..=b'9' => i32::from(c - b'0'),
            _ => return Err(self.error(INVALID_NUMBER)),
        };
        while let c @ b'0'..=b'9' = self.peek_or_null()? {
            self.src.discard();
            let digit = i32::from(c - b'0');
            if exp >= i32::MAX / 10 && (exp > i32::MAX / 10 || digit > i32::MAX % 10) {
                return self.parse_exponent_overflow(positive, significand == 0, positive_exp);
            }
            exp = exp * 10 + digit;
        }
        let final_exp = if positive_exp {
            starting_exp.saturating_add(exp)
        } else {
            starting_exp.saturating_sub(exp)
        };
        self.f64_from_parts(positive, significand, final_exp)
    }

    /// serde_json without `float_roundtrip`.
    fn f64_from_parts(
        &mut self,
        positive: bool,
        significand: u64,
        mut exponent: i32,
    ) -> Result<f64, ScanError> {
        let mut f = significand as f64;
        loop {
            match pow10(exponent.wrapping_abs() as usize) {
                Some(pow) => {
                    if exponent >= 0 {
                        f *= pow;
                        if f.is_infinite() {
                            return Err(self.error(NUMBER_OUT_OF_RANGE));
                        }
                    } else {
                        f /= pow;
                    }
                    break;
                }
                None => {
                    if f == 0.0 {
                        break;
                    }
                    if exponent >= 0 {
                        return Err(self.error(NUMBER_OUT_OF_RANGE));
                    }
                    f /= 1e308;
                    exponent += 308;
                }
            }
        }
        Ok(if positive { f } else { -f })
    }

    fn parse_long_integer(&mut self, positive: bool, significand: u64) -> Result<f64, ScanError> {
        let mut exponent: i32 = 0;
        loop {
            match self.peek_or_null()? {
                b'0'..=b'9' => {
                    self.src.discard();
                    exponent = exponent.wrapping_add(1);
                }
                b'.' => return self.parse_decimal(positive, significand, exponent),
                b'e' | b'E' => return self.parse_exponent(positive, significand, exponent),
                _ => return self.f64_from_parts(positive, significand, exponent),
            }
        }
    }

    fn parse_decimal_overflow(
        &mut self,
        positive: bool,
        significand: u64,
        exponent: i32,
    ) -> Result<f64, ScanError> {
        while let b'0'..=b'9' = self.peek_or_null()? {
            self.src.discard();
        }
        match self.peek_or_null()? {
            b'e' | b'E' => self.parse_exponent(positive, significand, exponent),
            _ => self.f64_from_parts(positive, significand, exponent),
        }
    }

    fn parse_exponent_overflow(
        &mut self,
        positive: bool,
        zero_significand: bool,
        positive_exp: bool,
    ) -> Result<f64, ScanError> {
        if !zero_significand && positive_exp {
            return Err(self.error(NUMBER_OUT_OF_RANGE));
        }
        while let b'0'..=b'9' = self.peek_or_null()? {
            self.src.discard();
        }
        Ok(if positive { 0.0 } else { -0.0 })
    }

    pub(super) fn ignore_integer(&mut self) -> Result<(), ScanError> {
        match self.next_or_null()? {
            b'0' => {
                if let b'0'..=b'9' = self.peek_or_null()? {
                    return Err(self.peek_error(INVALID_NUMBER));
                }
            }
            b'1'..=b'9' => {
                while let b'0'..=b'9' = self.peek_or_null()? {
                    self.src.discard();
                }
            }
            _ => return Err(self.error(INVALID_NUMBER)),
        }
        match self.peek_or_null()? {
            b'.' => self.ignore_decimal(),
            b'e' | b'E' => self.ignore_exponent(),
            _ => Ok(()),
        }
    }

    fn ignore_decimal(&mut self) -> Result<(), ScanError> {
        self.src.discard();
        let mut at_least_one_digit = false;
        while let b'0'..=b'9' = self.peek_or_null()? {
            self.src.discard();
            at_least_one_digit = true;
        }
        if !at_least_one_digit {
            return Err(self.peek_error(INVALID_NUMBER));
        }
        match self.peek_or_null()? {
            b'e' | b'E' => self.ignore_exponent(),
            _ => Ok(()),
        }
    }

    fn ignore_exponent(&mut self) -> Result<(), ScanError> {
        self.src.discard();
        if let b'+' | b'-' = self.peek_or_null()? {
            self.src.discard();
        }
        match self.next_or_null()? {
            b'0'..=b'9' => {}
            _ => return Err(self.error(INVALID_NUMBER)),
        }
        while let b'0'..=b'9' = self.peek_or_null()? {
            self.src.discard();
        }
        Ok(())
    }
}
