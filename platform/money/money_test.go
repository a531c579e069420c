package money

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseDecimal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in    string
		scale int
		want  int64
		err   error // nil: must parse; ErrNotWhole; or errAny
	}{
		{"0", 8, 0, nil},
		{"1", 8, 100_000_000, nil},
		{"0.001", 8, 100_000, nil},
		{"0.00000001", 8, 1, nil},
		{"0.00012345", 8, 12345, nil},
		{"21000000", 8, 2_100_000_000_000_000, nil},
		{"0.000000010000", 8, 1, nil}, // trailing zeros are not precision
		{"123.456789", 6, 123_456_789, nil},
		{"5.00", 6, 5_000_000, nil},
		{" 1.5 ", 8, 150_000_000, nil},
		{"0.000000001", 8, 0, ErrNotWhole}, // 1 msat-ish: refuse, never round
		{"0.00000000001", 8, 0, ErrNotWhole},
		{"1.0000001", 6, 0, ErrNotWhole},
		{"-1", 8, 0, errAny},
		{"abc", 8, 0, errAny},
		{"", 8, 0, errAny},
		{"92233720368.54775808", 8, 0, errAny}, // one past int64 in sat
		{"99999999999", 8, 0, errAny},
	} {
		got, err := ParseDecimal(tc.in, tc.scale)
		switch {
		case tc.err == nil:
			require.NoError(t, err, tc.in)
			require.Equal(t, tc.want, got, tc.in)
		case tc.err == errAny:
			require.Error(t, err, tc.in)
		default:
			require.True(t, errors.Is(err, tc.err), "%s: %v", tc.in, err)
		}
	}
}

var errAny = errors.New("any error")

func TestFormatRoundTrips(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		units int64
		scale int
		want  string
	}{{0, 8, "0.00000000"}, {12345, 8, "0.00012345"}, {2_100_000_000_000_000, 8, "21000000.00000000"}, {1, 6, "0.000001"}} {
		require.Equal(t, tc.want, Format(tc.units, tc.scale))
		back, err := ParseDecimal(tc.want, tc.scale)
		require.NoError(t, err)
		require.Equal(t, tc.units, back)
	}
}

func TestParseUnits(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"1", "546", "9223372036854775807"} {
		_, err := ParseUnits(ok, true)
		require.NoError(t, err, ok)
	}
	for _, bad := range []string{"", "0", "-1", "+1", "1.0", "1e3", " 1", "９", "9223372036854775808", "12345678901234567890"} {
		_, err := ParseUnits(bad, true)
		require.Error(t, err, bad)
	}
	n, err := ParseUnits("0", false)
	require.NoError(t, err)
	require.Zero(t, n)
}

func FuzzParseDecimal(f *testing.F) {
	for _, s := range []string{"0.001", "1", "21000000.00000000", "0.000000001", "-0", "1e5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		units, err := ParseDecimal(s, 8)
		if err != nil {
			return
		}
		if units < 0 {
			t.Fatalf("%q parsed to negative %d", s, units)
		}
		back, err := ParseDecimal(Format(units, 8), 8)
		if err != nil || back != units {
			t.Fatalf("%q -> %d -> %q -> %d, %v", s, units, Format(units, 8), back, err)
		}
	})
}

// TestParseDecimalNeverRounds: more significant digits than the decimal
// type holds are refused, not rounded.
func TestParseDecimalNeverRounds(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"0.10000000000000000001", "1.000000000000000000001", "12345678901234567890.1"} {
		_, err := ParseDecimal(s, 8)
		if err == nil {
			t.Fatalf("%q was accepted", s)
		}
	}
	for s, want := range map[string]int64{"0.10000000000000000000": 10_000_000, "1.5": 150_000_000, "0.00000001": 1} {
		got, err := ParseDecimal(s, 8)
		if err != nil || got != want {
			t.Fatalf("%q: %d, %v; want %d", s, got, err, want)
		}
	}
}
