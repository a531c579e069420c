package ledger

import (
	"math"
	"math/big"
	"regexp"
	"strconv"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// FuzzEntry builds entries from arbitrary fields and checks Validate
// against an independent statement of the rules (with big-integer sums, so
// no overflow can hide), and that every valid entry turns into a statement
// whose placeholders match its arguments (strict or not, Locked or not).
func FuzzEntry(f *testing.F) {
	f.Add("deposit_credit", "BTC", "pay-1", "", "alice", "", uint8(0), uint8(2), uint8(2), int64(100), int64(-100), int64(0), uint8(2))
	f.Add("withdrawal_hold", "BTC", "wd-1", "", "bob", "bob", uint8(0), uint8(1), uint8(2), int64(-5), int64(5), int64(0), uint8(2))
	f.Add("correction", "USDT_TRC20", "c-1", "fix", "a", "b", uint8(0), uint8(0), uint8(6), int64(-5), int64(3), int64(2), uint8(3))
	f.Add("correction", "BTC", "c-2", "", "a", "b", uint8(0), uint8(0), uint8(6), int64(-5), int64(3), int64(2), uint8(3))
	f.Add("payout_settle", "BTC", "wd-2", "", "u", "", uint8(1), uint8(4), uint8(2), int64(math.MaxInt64), int64(1), int64(math.MinInt64+1), uint8(3))
	f.Add("gift", "BTC", "x", "", "u", "", uint8(0), uint8(2), uint8(2), int64(1), int64(-1), int64(0), uint8(2))
	f.Add("deposit_credit", "", "x", "", "u", "", uint8(0), uint8(2), uint8(2), int64(1), int64(-1), int64(0), uint8(2))
	f.Add("deposit_credit", "BTC", "x", "", "", "", uint8(0), uint8(2), uint8(2), int64(1), int64(-1), int64(0), uint8(2))
	f.Add("deposit_credit", "BTC", "x", "", "u", "", uint8(0), uint8(0), uint8(2), int64(1), int64(-1), int64(0), uint8(2))
	f.Add("deposit_credit", "BTC", "x", "", "u", "u", uint8(2), uint8(2), uint8(2), int64(0), int64(0), int64(0), uint8(2))
	kinds := AccountKinds()
	f.Fuzz(func(t *testing.T, kind, asset, ref, memo, owner1, owner2 string, k1, k2, k3 uint8, a1, a2, a3 int64, n uint8) {
		accts := []Account{
			{Kind: kinds[int(k1)%len(kinds)], Owner: owner1},
			{Kind: kinds[int(k2)%len(kinds)], Owner: owner2},
			{Kind: kinds[int(k3)%len(kinds)]},
		}
		// Let the fuzzer also produce owners on system accounts and
		// missing owners on user accounts, but mostly well-formed ones.
		for i := range accts {
			if !accts[i].Kind.Materialized() && k1&0x80 == 0 {
				accts[i].Owner = ""
			}
		}
		amounts := []int64{a1, a2, a3}
		lines := make([]Line, int(n)%4)
		for i := range lines {
			lines[i] = Line{Account: accts[i], Amount: amounts[i]}
		}
		e := Entry{Kind: EntryKind(kind), Asset: asset, SourceRef: ref, Memo: memo, Lines: lines}
		err := e.Validate()
		want := oracleValid(e)
		if want != (err == nil) {
			t.Fatalf("Validate(%+v) = %v, oracle says valid=%v", e, err, want)
		}
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidEntry)
			return
		}
		for _, v := range []struct{ strict, locked bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
			e.Locked = v.locked
			stmt, args, _ := buildPost(e, v.strict)
			maxRef := 0
			for _, m := range placeholder.FindAllStringSubmatch(stmt, -1) {
				k, _ := strconv.Atoi(m[1])
				if k > maxRef {
					maxRef = k
				}
			}
			require.Equal(t, len(args), maxRef, "every argument has a placeholder and no placeholder lacks one")
			for _, a := range args {
				if s, ok := a.(string); ok && !AccountKind(s).Valid() {
					require.NotContains(t, stmt, "'"+s+"'", "text values travel as arguments, never inside the SQL")
				}
			}
		}
	})
}

var placeholder = regexp.MustCompile(`\$(\d+)`)

// oracleValid restates Validate's rules independently.
func oracleValid(e Entry) bool {
	textOK := func(s string, lo, hi int) bool {
		n := utf8.RuneCountInString(s)
		for i := 0; i < len(s); i++ {
			if s[i] == 0 {
				return false
			}
		}
		return utf8.ValidString(s) && n >= lo && n <= hi
	}
	known := map[EntryKind]bool{"deposit_credit": true, "withdrawal_hold": true, "withdrawal_release": true,
		"payout_broadcast": true, "payout_settle": true, "correction": true}
	if !known[e.Kind] || !textOK(e.Asset, 1, 32) || !textOK(e.SourceRef, 1, 512) || !textOK(e.Memo, 0, 2000) {
		return false
	}
	if e.Kind == "correction" && e.Memo == "" {
		return false
	}
	if len(e.Lines) < 2 {
		return false
	}
	sum := new(big.Int)
	seen := map[Account]bool{}
	minI, maxI := big.NewInt(math.MinInt64), big.NewInt(math.MaxInt64)
	for _, l := range e.Lines {
		user := l.Account.Kind == "user_available" || l.Account.Kind == "user_hold"
		if user && !textOK(l.Account.Owner, 1, 255) || !user && l.Account.Owner != "" {
			return false
		}
		if seen[l.Account] || l.Amount == 0 || l.Amount == math.MinInt64 {
			return false
		}
		seen[l.Account] = true
		sum.Add(sum, big.NewInt(l.Amount))
		if sum.Cmp(minI) < 0 || sum.Cmp(maxI) > 0 {
			return false // a running sum outside int64 is refused
		}
	}
	return sum.Sign() == 0
}

// FuzzSettlementLines: any settlement either is refused or yields a valid
// entry in which the gross leaves user_hold, the service fee is fee income,
// the network fee is an expense, in-flight is cleared of exactly the
// broadcast, and custody plus in-flight lose net plus network fee.
func FuzzSettlementLines(f *testing.F) {
	f.Add(int64(10_000), int64(9_000), int64(1_000), int64(800), int64(0), true)
	f.Add(int64(10_000), int64(9_000), int64(1_000), int64(800), int64(9_800), true)
	f.Add(int64(10_000), int64(10_000), int64(0), int64(800), int64(20_000), false)
	f.Add(int64(math.MaxInt64), int64(math.MaxInt64), int64(0), int64(math.MaxInt64), int64(1), false)
	f.Add(int64(1), int64(1), int64(0), int64(0), int64(1), false)
	f.Fuzz(func(t *testing.T, gross, net, serviceFee, networkFee, broadcast int64, deduct bool) {
		s := Settlement{Asset: "BTC", ExternalUserID: "u", SourceRef: "wd-1", Gross: gross, Net: net,
			ServiceFee: serviceFee, NetworkFee: networkFee, Mode: FeeAbsorb}
		if deduct {
			s.Mode = FeeDeduct
		}
		lines, err := s.Lines(broadcast)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidEntry)
			return
		}
		e := Entry{Kind: PayoutSettle, Asset: "BTC", SourceRef: "wd-1", Lines: lines}
		require.NoError(t, e.Validate())
		by := map[AccountKind]int64{}
		for _, l := range lines {
			by[l.Account.Kind] = l.Amount
		}
		require.Equal(t, -gross, by[UserHold])
		require.Equal(t, serviceFee, by[FeeIncome])
		require.Equal(t, -networkFee, by[NetworkFees])
		require.Equal(t, broadcast, by[InFlight])
		require.Equal(t, new(big.Int).Add(big.NewInt(net), big.NewInt(networkFee)),
			new(big.Int).Add(big.NewInt(by[Custody]), big.NewInt(by[InFlight])))
		if s.Mode == FeeAbsorb {
			require.Equal(t, gross, net)
			require.Zero(t, serviceFee)
		} else {
			require.Equal(t, gross, net+serviceFee)
		}
	})
}
