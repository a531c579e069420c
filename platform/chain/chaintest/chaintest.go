// Package chaintest makes valid destinations for tests: addresses derived
// from a seed (the same seed, the same address) and signed BOLT11
// invoices.
package chaintest

import (
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/btcsuite/btcd/btcec/v2"
	"github.com/btcsuite/btcd/btcec/v2/ecdsa"
	"github.com/btcsuite/btcd/btcutil"
	"github.com/btcsuite/btcd/btcutil/base58"
	"github.com/btcsuite/btcd/chaincfg/chainhash"
	"github.com/lightningnetwork/lnd/lnwire"
	"github.com/lightningnetwork/lnd/zpay32"

	"svc/platform/chain"
)

// Hash is the SHA-256 of seed.
func Hash(seed string) []byte { h := sha256.Sum256([]byte(seed)); return h[:] }

// P2WPKH is a pay-to-witness-pubkey-hash address on n.
func P2WPKH(t testing.TB, n chain.Network, seed string) string {
	t.Helper()
	a, err := btcutil.NewAddressWitnessPubKeyHash(Hash(seed)[:20], n.Params())
	if err != nil {
		t.Fatalf("chaintest: %v", err)
	}
	return a.EncodeAddress()
}

// Tron is a TRON address (base58check, version 0x41).
func Tron(seed string) string { return base58.CheckEncode(Hash(seed)[:20], 0x41) }

// BOLT11 mints a signed invoice on n created at created, with sats (0: no
// amount) and an expiry.
func BOLT11(t testing.TB, n chain.Network, created time.Time, sats int64, expiry time.Duration) string {
	t.Helper()
	key, err := btcec.NewPrivateKey()
	if err != nil {
		t.Fatalf("chaintest: %v", err)
	}
	var hash, secret [32]byte
	copy(hash[:], Hash(fmt.Sprint(created.UnixNano(), sats, expiry, time.Now().UnixNano())))
	secret[0] = 0xcd
	opts := []func(*zpay32.Invoice){zpay32.Description("test"), zpay32.PaymentAddr(secret), zpay32.Expiry(expiry)}
	if sats > 0 {
		opts = append(opts, zpay32.Amount(lnwire.MilliSatoshi(sats*1000)))
	}
	inv, err := zpay32.NewInvoice(n.Params(), hash, created, opts...)
	if err != nil {
		t.Fatalf("chaintest: %v", err)
	}
	s, err := inv.Encode(zpay32.MessageSigner{SignCompact: func(msg []byte) ([]byte, error) {
		return ecdsa.SignCompact(key, chainhash.HashB(msg), true), nil
	}})
	if err != nil {
		t.Fatalf("chaintest: %v", err)
	}
	return s
}
