package btcpaysim

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/btcsuite/btcd/btcec/v2"
	"github.com/btcsuite/btcd/btcec/v2/ecdsa"
	"github.com/btcsuite/btcd/btcutil"
	"github.com/btcsuite/btcd/btcutil/base58"
	"github.com/btcsuite/btcd/chaincfg"
	"github.com/lightningnetwork/lnd/lnwire"
	"github.com/lightningnetwork/lnd/zpay32"
)

// NetParams returns the chain parameters of a network name (mainnet,
// testnet, signet, regtest).
func NetParams(network string) (*chaincfg.Params, error) {
	switch strings.ToLower(network) {
	case "mainnet", "main", "":
		return &chaincfg.MainNetParams, nil
	case "testnet", "testnet3":
		return &chaincfg.TestNet3Params, nil
	case "signet":
		return &chaincfg.SigNetParams, nil
	case "regtest":
		return &chaincfg.RegressionNetParams, nil
	}
	return nil, fmt.Errorf("unknown network %q", network)
}

func randBytes(n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return b
}

func randHex(n int) string { return hex.EncodeToString(randBytes(n)) }

// newID returns a BTCPay-style base58 id of n random bytes.
func newID(n int) string { return base58.Encode(randBytes(n)) }

// newAddress returns a fresh, valid P2WPKH (bech32) address on net.
func newAddress(net *chaincfg.Params) string {
	a, err := btcutil.NewAddressWitnessPubKeyHash(randBytes(20), net)
	if err != nil {
		panic(err) // 20 bytes is always a valid witness program
	}
	return a.EncodeAddress()
}

// TronAddress returns the base58check TRON address of a 20-byte account
// (version byte 0x41, so it starts with T).
func TronAddress(account []byte) string { return base58.CheckEncode(account, 0x41) }

// DefaultTronPool returns n valid TRON addresses, the same on every run so
// that a local configuration can list them (USDT_POOL_ADDRESSES). They are
// derived from a fixed label: nobody holds their keys.
func DefaultTronPool(n int) []string {
	out := make([]string, n)
	for i := range out {
		h := sha256.Sum256([]byte(fmt.Sprintf("btcpaysim usdt pool %d", i)))
		out[i] = TronAddress(h[:20])
	}
	return out
}

// lightningNode signs the simulator's BOLT11 invoices.
type lightningNode struct {
	key *btcec.PrivateKey
	net *chaincfg.Params
}

func newLightningNode(net *chaincfg.Params) (*lightningNode, error) {
	k, err := btcec.NewPrivateKey()
	if err != nil {
		return nil, err
	}
	return &lightningNode{key: k, net: net}, nil
}

// invoice returns a signed BOLT11 invoice for msat (0: no amount) that
// expires at expires, and its payment hash and preimage.
func (n *lightningNode) invoice(msat int64, created, expires time.Time, memo string) (bolt11, hash, preimage string, err error) {
	pre := randBytes(32)
	h := sha256.Sum256(pre)
	expiry := expires.Sub(created).Truncate(time.Second)
	if expiry < time.Second {
		expiry = time.Second
	}
	opts := []func(*zpay32.Invoice){
		zpay32.Description(memo), zpay32.Expiry(expiry), zpay32.CLTVExpiry(40),
		zpay32.PaymentAddr([32]byte(randBytes(32))),
	}
	if msat > 0 {
		opts = append(opts, zpay32.Amount(lnwire.MilliSatoshi(msat)))
	}
	inv, err := zpay32.NewInvoice(n.net, h, created, opts...)
	if err != nil {
		return "", "", "", err
	}
	s, err := inv.Encode(zpay32.MessageSigner{SignCompact: func(m []byte) ([]byte, error) {
		return ecdsa.SignCompact(n.key, sha256sum(m), true), nil
	}})
	if err != nil {
		return "", "", "", err
	}
	return s, hex.EncodeToString(h[:]), hex.EncodeToString(pre), nil
}

// sha256sum is the single SHA-256 the BOLT11 signature covers (zpay32 hands
// the signer the raw message and expects a signature of its hash).
func sha256sum(m []byte) []byte {
	h := sha256.Sum256(m)
	return h[:]
}

// decodeBolt11 decodes a BOLT11 invoice for net.
func decodeBolt11(s string, net *chaincfg.Params) (*zpay32.Invoice, error) {
	return zpay32.Decode(s, net)
}

// validAddress reports whether s is a BTC address of net.
func validAddress(s string, net *chaincfg.Params) error {
	a, err := btcutil.DecodeAddress(s, net)
	if err != nil {
		return err
	}
	if !a.IsForNet(net) {
		return fmt.Errorf("address is not for %s", net.Name)
	}
	return nil
}
