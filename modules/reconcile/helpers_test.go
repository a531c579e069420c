package reconcile_test

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
	"github.com/lightningnetwork/lnd/zpay32"
	"github.com/stretchr/testify/require"

	"svc/platform/chain"
)

func hash(seed string) []byte { h := sha256.Sum256([]byte(seed)); return h[:] }

func tronAddr(seed string) string { return base58.CheckEncode(hash(seed)[:20], 0x41) }

func p2wpkh(t testing.TB, seed string) string {
	t.Helper()
	a, err := btcutil.NewAddressWitnessPubKeyHash(hash(seed)[:20], chain.Regtest.Params())
	require.NoError(t, err)
	return a.EncodeAddress()
}

// bolt11 mints a regtest invoice without an amount, created at created.
func bolt11(t testing.TB, created time.Time, expiry time.Duration) string {
	t.Helper()
	key, err := btcec.NewPrivateKey()
	require.NoError(t, err)
	var h, secret [32]byte
	copy(h[:], hash(fmt.Sprint(created.UnixNano(), expiry, time.Now().UnixNano())))
	secret[0] = 0xcd
	inv, err := zpay32.NewInvoice(chain.Regtest.Params(), h, created, zpay32.Description("test"), zpay32.PaymentAddr(secret), zpay32.Expiry(expiry))
	require.NoError(t, err)
	s, err := inv.Encode(zpay32.MessageSigner{SignCompact: func(msg []byte) ([]byte, error) {
		return ecdsa.SignCompact(key, chainhash.HashB(msg), true), nil
	}})
	require.NoError(t, err)
	return s
}
