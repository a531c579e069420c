package chain

import (
	"errors"
	"fmt"
	"strings"

	"github.com/btcsuite/btcd/btcutil"
	"github.com/btcsuite/btcd/btcutil/base58"
	"github.com/btcsuite/btcd/btcutil/bech32"
	"github.com/btcsuite/btcd/txscript"
)

// AddressKind is the output type a Bitcoin address pays to.
type AddressKind string

// The address kinds the service sends to.
const (
	P2PKH  AddressKind = "p2pkh"  // base58, starts with 1 (m or n on test networks)
	P2SH   AddressKind = "p2sh"   // base58, starts with 3 (2 on test networks)
	P2WPKH AddressKind = "p2wpkh" // bech32, witness v0, 20-byte program
	P2WSH  AddressKind = "p2wsh"  // bech32, witness v0, 32-byte program
	P2TR   AddressKind = "p2tr"   // bech32m, witness v1 (taproot)
)

// maxBTCAddressLen bounds the input before any decoding: the longest valid
// segwit address (BIP-173) has 90 characters; base58 ones are shorter.
const maxBTCAddressLen = 90

// BTCAddress is a Bitcoin address accepted for a network.
type BTCAddress struct {
	addr btcutil.Address
	kind AddressKind
}

// String returns the canonical encoding (bech32 in lower case).
func (a BTCAddress) String() string {
	if a.addr == nil {
		return ""
	}
	return a.addr.EncodeAddress()
}

// Kind returns the output type.
func (a BTCAddress) Kind() AddressKind { return a.kind }

// Address returns the btcutil form.
func (a BTCAddress) Address() btcutil.Address { return a.addr }

// ScriptPubKey returns the output script the address pays to.
func (a BTCAddress) ScriptPubKey() ([]byte, error) { return txscript.PayToAddrScript(a.addr) }

// segwitNets names the networks of each segwit human-readable part. tb is
// shared by testnet and signet, so an address cannot tell them apart.
var segwitNets = map[string]string{
	"bc":   "mainnet",
	"tb":   "testnet or signet",
	"bcrt": "regtest",
	"sb":   "simnet",
}

// base58Nets names the networks of each base58 version byte; testnet,
// signet and regtest share theirs.
var base58Nets = map[byte]string{
	0x00: "mainnet", 0x05: "mainnet",
	0x6f: "testnet, signet or regtest", 0xc4: "testnet, signet or regtest",
	0x3f: "simnet", 0x7b: "simnet",
}

// ParseBTCAddress checks that s is a Bitcoin address the service can send
// to on network n: P2PKH, P2SH (base58check), P2WPKH, P2WSH (bech32) or P2TR
// (bech32m). btcutil.DecodeAddress alone accepts testnet segwit addresses for
// mainnet, so the network is always checked again with IsForNet.
func (n Network) ParseBTCAddress(s string) (BTCAddress, error) {
	if err := precheck(s, "address", maxBTCAddressLen); err != nil {
		return BTCAddress{}, err
	}
	if err := notAnotherKindForBTC(s); err != nil {
		return BTCAddress{}, err
	}
	lower := strings.ToLower(s)
	if i := strings.LastIndexByte(lower, '1'); i > 0 {
		hrp := lower[:i]
		if _, ok := segwitNets[hrp]; ok {
			return n.parseSegwit(s, hrp)
		}
		if _, _, _, err := bech32.DecodeGeneric(s); err == nil {
			return BTCAddress{}, refuse(CodeUnknownFormat, fmt.Sprintf("unknown address prefix %q: Bitcoin addresses start with bc1, 1 or 3 (tb1, bcrt1, m, n or 2 on test networks)", hrp), nil)
		}
	}
	return n.parseBase58(s)
}

func (n Network) parseSegwit(s, hrp string) (BTCAddress, error) {
	// Decode the bech32 layer first: its errors say what the user got wrong
	// (a typo, mixed case, a character bech32 does not use).
	_, _, variant, err := bech32.DecodeGeneric(s)
	if err != nil {
		return BTCAddress{}, bech32Refusal(err)
	}
	// The structure (witness version, program length, padding) is checked
	// before the checksum variant, in the order of the BIP-350 reference
	// decoder, so each BIP-173/350 test vector is refused for its own reason.
	// btcutil checks the variant for versions 0 and 1 only; BIP-350 wants
	// bech32m for every version from 1.
	a, err := btcutil.DecodeAddress(s, n.params)
	if err != nil {
		var ver btcutil.UnsupportedWitnessVerError
		var plen btcutil.UnsupportedWitnessProgLenError
		msg := err.Error()
		switch {
		case errors.As(err, &ver) && variant != bech32.VersionM,
			strings.Contains(msg, "invalid checksum expected bech32m"):
			return BTCAddress{}, refuse(CodeBadChecksum, "bad checksum: segwit version 1 and later addresses use the bech32m checksum", err)
		case strings.Contains(msg, "invalid checksum expected bech32 "):
			return BTCAddress{}, refuse(CodeBadChecksum, "bad checksum: segwit version 0 addresses use the bech32 checksum", err)
		case errors.As(err, &ver):
			return BTCAddress{}, refuse(CodeUnsupported, fmt.Sprintf("address uses segwit version %d, which is not in use yet: sending to it could lose the money", byte(ver)), err)
		case errors.As(err, &plen):
			return BTCAddress{}, refuse(CodeUnsupported, fmt.Sprintf("address has a %d-byte witness program, which no standard output type uses", int(plen)), err)
		}
		return BTCAddress{}, refuse(CodeMalformed, "address is not a valid segwit address (bad witness version, program length or padding)", err)
	}
	return n.admit(a, segwitNets[hrp])
}

func (n Network) parseBase58(s string) (BTCAddress, error) {
	if err := base58Alphabet(s, "address"); err != nil {
		return BTCAddress{}, err
	}
	payload, version, err := base58.CheckDecode(s)
	switch {
	case errors.Is(err, base58.ErrChecksum):
		return BTCAddress{}, refuse(CodeBadChecksum, "bad checksum: the address is mistyped", err)
	case err != nil:
		return BTCAddress{}, refuse(CodeUnknownFormat, "unknown address format", err)
	case len(payload) != 20:
		return BTCAddress{}, refuse(CodeUnknownFormat, "unknown address format", nil)
	case version == tronVersion:
		return BTCAddress{}, refuse(CodeWrongKind, "this is a TRON address, not a Bitcoin address", nil)
	}
	if version != n.params.PubKeyHashAddrID && version != n.params.ScriptHashAddrID {
		if net, ok := base58Nets[version]; ok {
			return BTCAddress{}, wrongNetwork(net, n)
		}
		return BTCAddress{}, refuse(CodeUnknownFormat, "unknown address format", nil)
	}
	a, err := btcutil.DecodeAddress(s, n.params)
	if err != nil {
		return BTCAddress{}, refuse(CodeUnknownFormat, "unknown address format", err)
	}
	return n.admit(a, base58Nets[version])
}

// admit takes a decoded address when it is of a standard output type
// (kindOf) and for n; addrNet names the network its encoding says it is
// for.
func (n Network) admit(a btcutil.Address, addrNet string) (BTCAddress, error) {
	kind, err := kindOf(a)
	if err != nil {
		return BTCAddress{}, err
	}
	if !a.IsForNet(n.params) {
		return BTCAddress{}, wrongNetwork(addrNet, n)
	}
	return BTCAddress{addr: a, kind: kind}, nil
}

// kindOf admits only the standard output types. Anything else btcutil can
// decode (a raw public key, the anyone-can-spend pay-to-anchor output) is not
// a destination.
func kindOf(a btcutil.Address) (AddressKind, error) {
	switch a.(type) {
	case *btcutil.AddressPubKeyHash:
		return P2PKH, nil
	case *btcutil.AddressScriptHash:
		return P2SH, nil
	case *btcutil.AddressWitnessPubKeyHash:
		return P2WPKH, nil
	case *btcutil.AddressWitnessScriptHash:
		return P2WSH, nil
	case *btcutil.AddressTaproot:
		return P2TR, nil
	case *btcutil.AddressPayToAnchor:
		return "", refuse(CodeUnsupported, "this is a pay-to-anchor address, which anyone can spend: it is not a destination", nil)
	}
	return "", refuse(CodeUnknownFormat, "unknown address format", nil)
}

func wrongNetwork(addrNet string, n Network) *Error {
	return refuse(CodeWrongNetwork, fmt.Sprintf("address is for %s, this deployment uses %s", addrNet, n.name), nil)
}

// notAnotherKindForBTC recognises the destinations people paste by mistake
// into a Bitcoin address field, to say what they are.
func notAnotherKindForBTC(s string) error {
	lower := strings.ToLower(s)
	switch {
	case strings.HasPrefix(lower, "bitcoin:"):
		return refuse(CodeUnknownFormat, "send the bare address, not a bitcoin: payment link", nil)
	case strings.HasPrefix(lower, "lightning:"), looksLikeBOLT11(lower):
		return refuse(CodeWrongKind, "this is a Lightning invoice, not a Bitcoin address", nil)
	case strings.HasPrefix(lower, "0x"):
		return refuse(CodeEthereumAddress, "this is an Ethereum-style 0x address, not a Bitcoin address", nil)
	}
	return nil
}

func bech32Refusal(err error) *Error {
	var (
		mixed    bech32.ErrMixedCase
		sum      bech32.ErrInvalidChecksum
		badChar  bech32.ErrInvalidCharacter
		nonChars bech32.ErrNonCharsetChar
	)
	switch {
	case errors.As(err, &sum):
		return refuse(CodeBadChecksum, "bad checksum: the address is mistyped", err)
	case errors.As(err, &mixed):
		return refuse(CodeMixedCase, "address mixes upper and lower case; use one case throughout", err)
	case errors.As(err, &nonChars):
		return refuse(CodeInvalidCharacter, fmt.Sprintf("address contains %q, which bech32 addresses do not use (b, i, o, and 1 after the prefix, are never used)", rune(nonChars)), err)
	case errors.As(err, &badChar):
		return refuse(CodeInvalidCharacter, fmt.Sprintf("address contains %q, which is not allowed", rune(badChar)), err)
	}
	return refuse(CodeMalformed, "address is not a valid bech32 address (wrong length or misplaced separator)", err)
}

// precheck refuses what no destination can be: empty, with spaces or control
// characters, or longer than max.
func precheck(s, what string, max int) error {
	if s == "" {
		return refuse(CodeMalformed, what+" is empty", nil)
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return refuse(CodeInvalidCharacter, what+" contains spaces, control or non-ASCII characters", nil)
		}
	}
	if len(s) > max {
		return refuse(CodeUnknownFormat, fmt.Sprintf("%s is too long (%d characters)", what, len(s)), nil)
	}
	return nil
}

const base58Chars = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"

// base58Alphabet names the first character outside the base58 alphabet
// (0, O, I and l are left out of it because they look alike).
func base58Alphabet(s, what string) error {
	for _, r := range s {
		if !strings.ContainsRune(base58Chars, r) {
			return refuse(CodeInvalidCharacter, fmt.Sprintf("%s contains %q, which base58 addresses do not use (0, O, I and l are never used)", what, r), nil)
		}
	}
	return nil
}
