package btcpay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/govalues/decimal"
)

// maxDigits is the most significant digits an Amount holds exactly
// (govalues/decimal's 19-digit coefficient). BTC at Lightning's 11 decimals
// (21e6 BTC = 8 integer digits + 11) fits.
const maxDigits = 19

// ErrInexact means an amount does not convert to whole smallest units of
// the requested scale: the processor reported more decimals than the asset
// has (a Lightning payment with millisatoshis, for example). Callers must
// not round it; they send it to review.
var ErrInexact = errors.New("amount does not convert to whole smallest units")

// Amount is one of BTCPay's decimal amounts, held exactly. The zero value is
// zero. On the wire it is a JSON string ("0.00035228"); a JSON number is
// accepted too, as BTCPay accepts both.
type Amount struct{ d decimal.Decimal }

// ParseAmount parses a plain decimal string ("-12.345"), exactly: more
// significant digits than an Amount holds is an error, never a rounding.
func ParseAmount(s string) (Amount, error) {
	t := strings.TrimSpace(s)
	neg := strings.HasPrefix(t, "-")
	digits := strings.TrimPrefix(strings.TrimPrefix(t, "-"), "+")
	intPart, frac, _ := strings.Cut(digits, ".")
	if intPart+frac == "" {
		return Amount{}, fmt.Errorf("amount %q is not a decimal number", s)
	}
	for _, r := range intPart + frac {
		if r < '0' || r > '9' {
			return Amount{}, fmt.Errorf("amount %q is not a decimal number", s)
		}
	}
	intTrim, fracTrim := strings.TrimLeft(intPart, "0"), strings.TrimRight(frac, "0")
	// The decimal's coefficient holds 19 digits and its scale is at most
	// 19: anything beyond would be rounded, so it is refused instead.
	if len(fracTrim) > maxDigits || (intTrim != "" && len(intTrim)+len(fracTrim) > maxDigits) {
		return Amount{}, fmt.Errorf("amount %q has more digits than can be held exactly", s)
	}
	if intTrim == "" {
		intTrim = "0"
	}
	// Keep the written scale ("5.00") when it fits; trailing zeros beyond it
	// are dropped, which loses nothing.
	if len(frac) > len(fracTrim) && len(intTrim)+len(frac) <= maxDigits {
		fracTrim = frac
	}
	canon := intTrim
	if fracTrim != "" {
		canon += "." + fracTrim
	}
	if neg {
		canon = "-" + canon
	}
	d, err := decimal.Parse(canon)
	if err != nil {
		return Amount{}, fmt.Errorf("amount %q: %w", s, err)
	}
	return Amount{d: d}, nil
}

// MustAmount parses s and panics on error (constants in tests).
func MustAmount(s string) Amount {
	a, err := ParseAmount(s)
	if err != nil {
		panic(err)
	}
	return a
}

// AmountFromUnits returns units smallest units of the given scale as an
// Amount (12345, 8 is 0.00012345).
func AmountFromUnits(units int64, scale int) Amount {
	d, err := decimal.New(units, scale)
	if err != nil {
		panic(fmt.Sprintf("btcpay.AmountFromUnits: %v", err))
	}
	return Amount{d: d}
}

// String renders the amount as BTCPay writes it (plain decimal notation).
func (a Amount) String() string { return a.d.String() }

// Decimal returns the underlying decimal.
func (a Amount) Decimal() decimal.Decimal { return a.d }

// IsZero reports a zero amount.
func (a Amount) IsZero() bool { return a.d.IsZero() }

// IsNeg reports a negative amount.
func (a Amount) IsNeg() bool { return a.d.IsNeg() }

// Cmp compares a and b (-1, 0, 1).
func (a Amount) Cmp(b Amount) int { return a.d.Cmp(b.d) }

// Units converts the amount to smallest units of scale exactly: 8 gives
// satoshis, 11 millisatoshis, 6 micro-USDT. An amount with more decimals
// than scale is ErrInexact; one beyond int64 is an error too. Negative
// amounts (wallet sends) give negative units.
func (a Amount) Units(scale int) (int64, error) {
	if scale < 0 || scale > maxDigits {
		return 0, fmt.Errorf("scale %d out of range", scale)
	}
	d := a.d.Trim(0)
	if d.Scale() > scale {
		return 0, fmt.Errorf("%s at %d decimals: %w", a.d, scale, ErrInexact)
	}
	d = d.Pad(scale)
	if d.Scale() != scale || d.Coef() > math.MaxInt64 {
		return 0, fmt.Errorf("amount %s is too large for %d decimals", a.d, scale)
	}
	n := int64(d.Coef())
	if d.IsNeg() {
		n = -n
	}
	return n, nil
}

// MulCeil multiplies the amount by n and rounds up to a whole number: a fee
// rate in sat/vB times a size in vbytes gives the fee in satoshis, never
// less than the rate asks for.
func (a Amount) MulCeil(n int64) (int64, error) {
	p, err := a.d.Mul(decimal.MustNew(n, 0))
	if err != nil {
		return 0, fmt.Errorf("%s x %d: %w", a.d, n, err)
	}
	whole, _, ok := p.Ceil(0).Int64(0)
	if !ok {
		return 0, fmt.Errorf("%s x %d is too large", a.d, n)
	}
	return whole, nil
}

// MarshalJSON writes the amount as a JSON string.
func (a Amount) MarshalJSON() ([]byte, error) { return json.Marshal(a.d.String()) }

// UnmarshalJSON reads a JSON string or number, exactly.
func (a *Amount) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		*a = Amount{}
		return nil
	}
	s := string(b)
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
	} else if strings.ContainsAny(s, "eE") {
		// A JSON number in exponent form: BTCPay writes decimals plainly,
		// so refuse rather than guess.
		return fmt.Errorf("amount %s: exponent notation is not accepted", s)
	}
	v, err := ParseAmount(s)
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// UnixTime is a BTCPay timestamp: unix seconds on the wire. A numeric
// string is accepted too (the payout template documents date as a string).
type UnixTime struct{ time.Time }

// MarshalJSON writes unix seconds.
func (t UnixTime) MarshalJSON() ([]byte, error) {
	if t.IsZero() {
		return []byte("null"), nil
	}
	return []byte(strconv.FormatInt(t.Unix(), 10)), nil
}

// UnmarshalJSON reads unix seconds from a number or a numeric string.
func (t *UnixTime) UnmarshalJSON(b []byte) error {
	n, ok, err := flexInt(b)
	if err != nil {
		return fmt.Errorf("timestamp: %w", err)
	}
	if !ok {
		*t = UnixTime{}
		return nil
	}
	*t = UnixTime{time.Unix(n, 0).UTC()}
	return nil
}

// FlexInt is an integer that BTCPay sends as a number or as a string
// (block heights, confirmations, Lightning balances).
type FlexInt struct {
	V     int64
	Valid bool // false for null or absent
}

// MarshalJSON writes a number, or null.
func (f FlexInt) MarshalJSON() ([]byte, error) {
	if !f.Valid {
		return []byte("null"), nil
	}
	return []byte(strconv.FormatInt(f.V, 10)), nil
}

// UnmarshalJSON reads a number or a numeric string.
func (f *FlexInt) UnmarshalJSON(b []byte) error {
	n, ok, err := flexInt(b)
	if err != nil {
		return err
	}
	*f = FlexInt{V: n, Valid: ok}
	return nil
}

func flexInt(b []byte) (int64, bool, error) {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) || len(b) == 0 {
		return 0, false, nil
	}
	s := string(b)
	if b[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return 0, false, err
		}
		if s == "" {
			return 0, false, nil
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		// Integral values written with a fraction ("12.0"): accept only
		// when nothing is lost.
		a, perr := ParseAmount(s)
		if perr != nil {
			return 0, false, fmt.Errorf("%q is not an integer", s)
		}
		n, err = a.Units(0)
		if err != nil {
			return 0, false, fmt.Errorf("%q is not an integer", s)
		}
	}
	return n, true, nil
}

// Metadata is a free-form BTCPay metadata object, kept as raw JSON values.
type Metadata map[string]json.RawMessage

// String returns the string value of key, or "" when it is absent or not a
// string.
func (m Metadata) String(key string) string {
	raw, ok := m[key]
	if !ok {
		return ""
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return ""
	}
	return s
}
