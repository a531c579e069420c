package chain_test

import (
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/platform/chain"
)

// The fuzz targets check that no input makes a parser panic, that every
// refusal is a *chain.Error with a message, and that every accepted value
// round-trips through its canonical form. By default only the seed corpus
// (the published vectors) runs; go test -fuzz=FuzzBTCAddress explores.

func requireRefusal(t *testing.T, err error) {
	t.Helper()
	var ce *chain.Error
	require.True(t, errors.As(err, &ce), "refusal %v is not a *chain.Error", err)
	require.NotEmpty(t, ce.Code)
	require.NotEmpty(t, ce.Error())
}

func seedNetworks(f *testing.F, s string) {
	for i := range allNetworks {
		f.Add(uint8(i), s)
	}
}

// fuzzOnNetworks fuzzes parse with the inputs seedNetworks seeded, on the
// network the fuzzer picks: a refusal must be a proper one
// (requireRefusal), and check looks at what was accepted.
func fuzzOnNetworks[T any](f *testing.F, parse func(chain.Network, string) (T, error), check func(t *testing.T, n chain.Network, s string, v T)) {
	f.Fuzz(func(t *testing.T, netIdx uint8, s string) {
		n := allNetworks[int(netIdx)%len(allNetworks)]
		v, err := parse(n, s)
		if err != nil {
			requireRefusal(t, err)
			return
		}
		check(t, n, s, v)
	})
}

func FuzzBTCAddress(f *testing.F) {
	for _, name := range []string{"bip173.json", "bip350.json"} {
		raw, err := os.ReadFile("testdata/" + name)
		require.NoError(f, err)
		var v bipVectors
		require.NoError(f, json.Unmarshal(raw, &v))
		for _, a := range append(v.Valid, v.Invalid...) {
			seedNetworks(f, a.Address)
		}
	}
	for _, s := range []string{"1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfNa", "3EktnHQD7RiAE6uzMj2ZifT9YgRrkSgzQX", "mk2QpYatsKicvFVuTAQLBryyccRXMUaGHP", "bc1pfeessrawgf", "TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t", "0xa614f803b6fd780986a42c78ec9c7f77e6ded13c", ""} {
		seedNetworks(f, s)
	}
	fuzzOnNetworks(f, chain.Network.ParseBTCAddress, func(t *testing.T, n chain.Network, s string, a chain.BTCAddress) {
		again, err := n.ParseBTCAddress(a.String())
		require.NoError(t, err, "canonical form %q of %q refused", a.String(), s)
		require.Equal(t, a.String(), again.String())
		require.Equal(t, a.Kind(), again.Kind())
		require.True(t, a.Address().IsForNet(n.Params()))
		spk, err := a.ScriptPubKey()
		require.NoError(t, err)
		require.NotEmpty(t, spk)
	})
}

func FuzzTronAddress(f *testing.F) {
	for _, s := range []string{
		"TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t", "TXLAQ63Xg1NAzckPwKHvzw7CSEmLMEqcdj", "T9yD14Nj9j7xAB4dbGeiX9h8unkKHxuWwb",
		"TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6u", "0xa614f803b6fd780986a42c78ec9c7f77e6ded13c", "41a614f803b6fd780986a42c78ec9c7f77e6ded13c",
		"1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfNa", "", "T",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := chain.ParseTronAddress(s)
		if err != nil {
			requireRefusal(t, err)
		} else {
			require.Equal(t, s, a.String(), "base58check has one encoding per value")
			b, err := chain.TronAddressFromHex(a.Hex())
			require.NoError(t, err)
			require.Equal(t, a, b)
		}
		// The node-side hex decoder must not panic either.
		if h, err := chain.TronAddressFromHex(s); err == nil {
			back, err := chain.ParseTronAddress(h.String())
			require.NoError(t, err)
			require.Equal(t, h, back)
		}
	})
}

func FuzzBOLT11(f *testing.F) {
	raw, err := os.ReadFile("testdata/bolt11.json")
	require.NoError(f, err)
	var doc struct {
		Valid, Invalid []bolt11Vector
	}
	require.NoError(f, json.Unmarshal(raw, &doc))
	for _, v := range append(doc.Valid, doc.Invalid...) {
		seedNetworks(f, v.Invoice)
	}
	seedNetworks(f, "lnbcrt1")
	seedNetworks(f, "lightning:lnbc1")
	now := time.Unix(1496314658, 0)
	fuzzOnNetworks(f, chain.Network.DecodeBOLT11, func(t *testing.T, n chain.Network, _ string, inv chain.Invoice) {
		again, err := n.DecodeBOLT11(inv.String())
		require.NoError(t, err)
		require.Equal(t, inv, again)
		require.False(t, inv.ExpiresAt.Before(inv.CreatedAt))
		require.True(t, inv.AmountSat >= 0)
		require.Len(t, inv.PaymentHash, 64)
		if err := inv.CheckLife(now, chain.MinInvoiceLife); err != nil {
			requireRefusal(t, err)
		}
	})
}
