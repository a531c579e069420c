package chain_test

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/btcsuite/btcd/btcec/v2"
	"github.com/btcsuite/btcd/btcec/v2/ecdsa"
	"github.com/btcsuite/btcd/chaincfg/chainhash"
	"github.com/lightningnetwork/lnd/lnwire"
	"github.com/lightningnetwork/lnd/zpay32"
	"github.com/stretchr/testify/require"

	"svc/platform/chain"
)

type bolt11Vector struct {
	Title         string `json:"title"`
	Invoice       string `json:"invoice"`
	Network       string `json:"network"`
	AmountMsat    *int64 `json:"amount_msat"`
	Timestamp     int64  `json:"timestamp"`
	ExpirySeconds int64  `json:"expiry_seconds"`
	PaymentHash   string `json:"payment_hash"`
	Payee         string `json:"payee"`
	Description   string `json:"description"`
}

func loadBOLT11(t *testing.T) (valid, invalid []bolt11Vector) {
	t.Helper()
	raw, err := os.ReadFile("testdata/bolt11.json")
	require.NoError(t, err)
	var doc struct {
		Source  string         `json:"source"`
		Valid   []bolt11Vector `json:"valid"`
		Invalid []bolt11Vector `json:"invalid"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.NotEmpty(t, doc.Source)
	require.NotEmpty(t, doc.Valid)
	require.NotEmpty(t, doc.Invalid)
	return doc.Valid, doc.Invalid
}

// TestBOLT11SpecExamples decodes every valid example of BOLT 11 on its own
// network and checks what the service reads from it. The pico-BTC example
// asks for 967878534 msat, which is not whole satoshis: the service cannot
// pay it exactly, so it is refused.
func TestBOLT11SpecExamples(t *testing.T) {
	t.Parallel()
	valid, _ := loadBOLT11(t)
	for _, v := range valid {
		t.Run(v.Title, func(t *testing.T) {
			t.Parallel()
			n, err := chain.ParseNetwork(v.Network)
			require.NoError(t, err)
			inv, err := n.DecodeBOLT11(v.Invoice)
			if v.AmountMsat != nil && *v.AmountMsat%1000 != 0 {
				require.ErrorIs(t, err, chain.ErrSubSatoshi)
				require.Equal(t, "invoice amount 967878534 msat is not a whole number of satoshis", err.Error())
				return
			}
			require.NoError(t, err)
			require.Equal(t, strings.ToLower(v.Invoice), inv.String())
			if v.AmountMsat == nil {
				require.False(t, inv.HasAmount)
				require.Zero(t, inv.AmountSat)
			} else {
				require.True(t, inv.HasAmount)
				require.Equal(t, *v.AmountMsat/1000, inv.AmountSat)
			}
			require.Equal(t, time.Unix(v.Timestamp, 0).UTC(), inv.CreatedAt)
			require.Equal(t, time.Unix(v.Timestamp+v.ExpirySeconds, 0).UTC(), inv.ExpiresAt)
			require.Equal(t, v.PaymentHash, inv.PaymentHash)
			require.Equal(t, v.Payee, inv.Payee)
			require.Equal(t, v.Description, inv.Description)

			for _, other := range allNetworks {
				if other == n {
					continue
				}
				_, err := other.DecodeBOLT11(v.Invoice)
				require.ErrorIs(t, err, chain.ErrWrongNetwork, other.String())
				require.Equal(t, "invoice is for "+v.Network+", this deployment uses "+other.String(), err.Error())
			}
		})
	}
}

// TestBOLT11SpecInvalidExamples refuses every invalid example of BOLT 11,
// each for its own reason.
func TestBOLT11SpecInvalidExamples(t *testing.T) {
	t.Parallel()
	_, invalid := loadBOLT11(t)
	codes := map[string]chain.Code{
		"Same, but adding invalid unknown feature 100": chain.CodeUnsupported,
		"Bech32 checksum is invalid.":                  chain.CodeBadChecksum,
		"Malformed bech32 string (no 1)":               chain.CodeUnknownFormat,
		"Malformed bech32 string (mixed case)":         chain.CodeMixedCase,
		"Signature is not recoverable.":                chain.CodeMalformed,
		"String is too short.":                         chain.CodeMalformed,
		"Invalid multiplier":                           chain.CodeMalformed,
		"Invalid sub-millisatoshi precision.":          chain.CodeSubSatoshi,
	}
	require.Len(t, codes, len(invalid))
	for _, v := range invalid {
		t.Run(v.Title, func(t *testing.T) {
			t.Parallel()
			want, ok := codes[v.Title]
			require.True(t, ok, "no expected code for %q", v.Title)
			for _, n := range allNetworks {
				_, err := n.DecodeBOLT11(v.Invoice)
				require.Error(t, err)
				if n == chain.Mainnet || want == chain.CodeUnknownFormat {
					require.Equal(t, want, codeOf(t, err), err.Error())
				} else {
					require.Equal(t, chain.CodeWrongNetwork, codeOf(t, err), err.Error())
				}
			}
		})
	}
}

// TestBOLT11Life checks the remaining-life rule with an injected now, on
// the spec's one-minute coffee invoice and its one-hour donation invoice.
func TestBOLT11Life(t *testing.T) {
	t.Parallel()
	const coffee = "lnbc2500u1pvjluezpp5qqqsyqcyq5rqwzqfqqqsyqcyq5rqwzqfqqqsyqcyq5rqwzqfqypqdq5xysxxatsyp3k7enxv4jsxqzpuaztrnwngzn3kdzw5hydlzf03qdgm2hdq27cqv3agm2awhz5se903vruatfhq77w3ls4evs3ch9zw97j25emudupq63nyw24cg27h2rspfj9srp"
	const donation = "lnbc1pvjluezpp5qqqsyqcyq5rqwzqfqqqsyqcyq5rqwzqfqqqsyqcyq5rqwzqfqypqdpl2pkx2ctnv5sxxmmwwd5kgetjypeh2ursdae8g6twvus8g6rfwvs8qun0dfjkxaq8rkx3yf5tcsyz3d73gafnh3cax9rn449d9p5uxz9ezhhypd0elx87sjle52x86fux2ypatgddc6k63n7erqz25le42c4u4ecky03ylcqca784w"
	created := time.Unix(1496314658, 0)
	tests := []struct {
		name    string
		invoice string
		now     time.Time
		code    chain.Code
		message string
	}{
		{name: "one-minute invoice just created", invoice: coffee, now: created, code: chain.CodeInvoiceExpiring,
			message: "invoice has less than 2 minutes left (it expires at 2017-06-01T10:58:38Z); ask for a new one"},
		{name: "one-minute invoice at its expiry", invoice: coffee, now: created.Add(time.Minute), code: chain.CodeInvoiceExpired,
			message: "invoice expired at 2017-06-01T10:58:38Z"},
		{name: "one-minute invoice long after", invoice: coffee, now: created.Add(365 * 24 * time.Hour), code: chain.CodeInvoiceExpired},
		{name: "one-hour invoice, fresh", invoice: donation, now: created},
		{name: "one-hour invoice, 2m1s left", invoice: donation, now: created.Add(time.Hour - 2*time.Minute - time.Second)},
		{name: "one-hour invoice, exactly 2m left", invoice: donation, now: created.Add(time.Hour - 2*time.Minute)},
		{name: "one-hour invoice, 1m59s left", invoice: donation, now: created.Add(time.Hour - 2*time.Minute + time.Second), code: chain.CodeInvoiceExpiring},
		{name: "one-hour invoice, 1s left", invoice: donation, now: created.Add(time.Hour - time.Second), code: chain.CodeInvoiceExpiring},
		{name: "one-hour invoice, expired", invoice: donation, now: created.Add(time.Hour), code: chain.CodeInvoiceExpired},
		{name: "one-hour invoice, timestamp in the future", invoice: donation, now: created.Add(-time.Hour)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			inv, err := chain.Mainnet.ValidateBOLT11(tt.invoice, tt.now)
			if requireOutcome(t, err, tt.code, tt.message) {
				require.Equal(t, tt.invoice, inv.String())
			}
		})
	}
}

// mint encodes and signs a fresh invoice the way a Lightning node would.
func mint(t *testing.T, n chain.Network, key *btcec.PrivateKey, created time.Time, opts ...func(*zpay32.Invoice)) string {
	t.Helper()
	var hash, secret [32]byte
	hash[0], secret[0] = 0xab, 0xcd
	opts = append([]func(*zpay32.Invoice){zpay32.Description("test"), zpay32.PaymentAddr(secret)}, opts...)
	inv, err := zpay32.NewInvoice(n.Params(), hash, created, opts...)
	require.NoError(t, err)
	s, err := inv.Encode(zpay32.MessageSigner{SignCompact: func(msg []byte) ([]byte, error) {
		return ecdsa.SignCompact(key, chainhash.HashB(msg), true), nil
	}})
	require.NoError(t, err)
	return s
}

// TestBOLT11Networks mints an invoice on each network and checks it is
// accepted there only, with the invoice's network named in the refusal
// (zpay32 alone reports a regtest invoice on mainnet as a number parse error).
func TestBOLT11Networks(t *testing.T) {
	t.Parallel()
	key, err := btcec.NewPrivateKey()
	require.NoError(t, err)
	now := time.Now().Truncate(time.Second)
	prefixes := map[chain.Network]string{chain.Mainnet: "lnbc", chain.Testnet: "lntb", chain.Signet: "lntbs", chain.Regtest: "lnbcrt"}
	for _, n := range allNetworks {
		s := mint(t, n, key, now, zpay32.Amount(lnwire.MilliSatoshi(12_345_000)), zpay32.Expiry(10*time.Minute))
		require.True(t, strings.HasPrefix(s, prefixes[n]+"12345"), s)
		inv, err := n.ValidateBOLT11(s, now)
		require.NoError(t, err, n.String())
		require.Equal(t, int64(12_345), inv.AmountSat)
		require.Equal(t, hex.EncodeToString(key.PubKey().SerializeCompressed()), inv.Payee, "signature recovers the signer")
		require.Equal(t, now.Add(10*time.Minute).UTC(), inv.ExpiresAt)
		require.NoError(t, inv.CheckAmount(12_345))
		require.ErrorIs(t, inv.CheckAmount(12_344), chain.ErrAmountMismatch)
		for _, other := range allNetworks {
			if other == n {
				continue
			}
			_, err := other.ValidateBOLT11(s, now)
			require.ErrorIs(t, err, chain.ErrWrongNetwork)
			require.Equal(t, "invoice is for "+n.String()+", this deployment uses "+other.String(), err.Error())
		}
		upper, err := n.DecodeBOLT11(strings.ToUpper(s))
		require.NoError(t, err, "BOLT 11 allows all upper case")
		require.Equal(t, s, upper.String())
	}
}

func TestBOLT11Amounts(t *testing.T) {
	t.Parallel()
	key, err := btcec.NewPrivateKey()
	require.NoError(t, err)
	now := time.Now()

	noAmount := mint(t, chain.Regtest, key, now)
	inv, err := chain.Regtest.ValidateBOLT11(noAmount, now)
	require.NoError(t, err)
	require.False(t, inv.HasAmount)
	require.NoError(t, inv.CheckAmount(1), "an invoice without an amount fits any")
	require.Equal(t, now.Add(time.Hour).Truncate(time.Second).UTC(), inv.ExpiresAt, "default expiry is one hour")

	_, err = chain.Regtest.DecodeBOLT11(mint(t, chain.Regtest, key, now, zpay32.Amount(1500)))
	require.ErrorIs(t, err, chain.ErrSubSatoshi)
	require.Equal(t, "invoice amount 1500 msat is not a whole number of satoshis", err.Error())

	_, err = chain.Regtest.DecodeBOLT11(mint(t, chain.Regtest, key, now, zpay32.Amount(1)))
	require.ErrorIs(t, err, chain.ErrSubSatoshi)

	inv, err = chain.Regtest.DecodeBOLT11(mint(t, chain.Regtest, key, now, zpay32.Amount(1000)))
	require.NoError(t, err)
	require.Equal(t, int64(1), inv.AmountSat)
}

func TestBOLT11OtherKinds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		input string
		code  chain.Code
	}{
		{name: "empty", input: "", code: chain.CodeMalformed},
		{name: "trailing space", input: "lnbc1pvjluez ", code: chain.CodeInvalidCharacter},
		{name: "lightning: prefix", input: "lightning:lnbc1pvjluezpp5qqqsyqcyq5rqwzqfqqqsyqcyq5rqwzqfqqqsyqcyq5rqwzqfqypq", code: chain.CodeUnknownFormat},
		{name: "LNURL", input: "LNURL1DP68GURN8GHJ7UM9WFMXJCM99E3K7MF0V9CXJ0M385EKVCENXC6R2C35XVUKXEFCV5MKVV34X5EKZD3EV56NYD3HXQURZEPEXEJXXEPNXSCRVWFNV9NXZCN9XQ6XYEFHVGCXXCMYXYMNSERXFQ5FNS", code: chain.CodeUnsupported},
		{name: "BOLT12 offer", input: "lno1pqps7sjqpgtyzm3qv4uxzmtsd3jjqer9wd3hy6tsw35k7msjzfpy7nz5yqcnygrfdej82um5wf5k2uckyypwa3eyt44h6txtxquqh7lz5djge4afgfjn7k4rgrkuag0jsd5xvxg", code: chain.CodeUnsupported},
		{name: "Bitcoin address", input: "bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4", code: chain.CodeWrongKind},
		{name: "testnet Bitcoin address", input: "mk2QpYatsKicvFVuTAQLBryyccRXMUaGHP", code: chain.CodeWrongKind},
		{name: "TRON address", input: "TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t", code: chain.CodeUnknownFormat},
		{name: "simnet invoice", input: "lnsb241pvjluezpp5qqqsyqcyq5rqwzqfqqqsyqcyq5rqwzqfqqqsyqcyq5rqwzqfqypqdqqnp4q0n326hr8v9zprg8gsvezcch06gfaqqhde2aj730yg0durunfhv66jdgev3gnwg0aul7unhqlqvrkp23f0negjsw8ac9f6wa8w9nvppgp3updmr5znhze6l5zneztc0alknntn0wv8fkkgvjqwp0jss66cngqcj9tj6", code: chain.CodeWrongNetwork},
		{name: "too long", input: "lnbc1" + strings.Repeat("q", 2048), code: chain.CodeUnknownFormat},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := chain.Mainnet.DecodeBOLT11(tt.input)
			require.Error(t, err)
			require.Equal(t, tt.code, codeOf(t, err), err.Error())
		})
	}
}
