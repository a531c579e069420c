// Package money converts between the ledger's integer smallest units and the
// decimal strings of the API and the processor. It never rounds: a value that
// does not convert exactly is an error, so callers can refuse or send it to
// review instead of guessing.
package money

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/govalues/decimal"
)

// ErrNotWhole means a decimal has more fractional digits than the asset has.
var ErrNotWhole = errors.New("amount does not convert to whole smallest units")

// Format renders units (smallest units) with exactly scale decimals, e.g.
// Format(12345, 8) = "0.00012345".
func Format(units int64, scale int) string {
	d, err := decimal.New(units, scale)
	if err != nil { // scale outside 0..19 is a programming error
		panic(fmt.Sprintf("money.Format: %v", err))
	}
	return d.String()
}

// ParseDecimal converts a decimal string (display units, as the processor
// sends) to smallest units of an asset with the given scale. It refuses
// amounts with more significant decimals than scale or more than 19
// significant digits (ErrNotWhole: never rounded), negative
// amounts and anything that overflows int64.
func ParseDecimal(s string, scale int) (int64, error) {
	s = strings.TrimSpace(s)
	// The decimal type holds 19 significant digits and rounds longer
	// inputs: refuse them instead, so nothing is ever rounded.
	if significantDigits(s) > 19 {
		return 0, fmt.Errorf("amount %q has more than 19 significant digits: %w", s, ErrNotWhole)
	}
	d, err := decimal.Parse(s)
	if err != nil {
		return 0, fmt.Errorf("parse amount %q: %w", s, err)
	}
	if d.IsNeg() {
		return 0, fmt.Errorf("amount %q is negative", s)
	}
	if d.Trim(0).Scale() > scale {
		return 0, fmt.Errorf("%q at %d decimals: %w", s, scale, ErrNotWhole)
	}
	// Shift the decimal point by scale digits; the result is an integer
	// because the scale check above passed, and Int64(0) reports whether it
	// fits.
	pow, err := decimal.New(1, 0)
	if err != nil {
		return 0, err
	}
	for range scale {
		if pow, err = pow.Mul(decimal.Ten); err != nil {
			return 0, fmt.Errorf("amount %q is too large", s)
		}
	}
	units, err := d.Mul(pow)
	if err != nil {
		return 0, fmt.Errorf("amount %q is too large", s)
	}
	whole, frac, ok := units.Int64(0)
	if !ok || frac != 0 {
		return 0, fmt.Errorf("amount %q is too large", s)
	}
	return whole, nil
}

// significantDigits counts the digits of s's mantissa without leading
// zeros, and without trailing zeros after a decimal point ("0.0012300" has
// 3, "1200" has 4).
func significantDigits(s string) int {
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		s = s[:i]
	}
	s = strings.TrimLeft(s, "+-")
	intPart, frac, dot := strings.Cut(s, ".")
	if dot {
		frac = strings.TrimRight(frac, "0")
	}
	return len(strings.TrimLeft(intPart+frac, "0"))
}

// ParseUnits parses a request's integer string of smallest units. It accepts
// only ASCII digits (no sign, no exponent, no spaces) and refuses zero when
// positive is true.
func ParseUnits(s string, positive bool) (int64, error) {
	if s == "" || len(s) > 19 {
		return 0, errors.New("must be an integer string of smallest units")
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return 0, errors.New("must be an integer string of smallest units")
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, errors.New("must be an integer string of smallest units")
	}
	if positive && n == 0 {
		return 0, errors.New("must be greater than zero")
	}
	return n, nil
}
