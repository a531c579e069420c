package chain

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/btcsuite/btcd/btcutil/base58"
)

// tronVersion is the first byte of every TRON address (mainnet and the
// test networks alike), which is why they all start with T in base58.
const tronVersion = 0x41

// tronAddressLen is the length of a base58check TRON address.
const tronAddressLen = 34

// TronAddress is a TRON account or contract address: the 20-byte
// account id that follows the 0x41 version byte.
type TronAddress [20]byte

// ParseTronAddress checks that s is a TRON address in its usual form:
// base58check, 34 characters, starting with T (version byte 0x41). The hex
// form and Ethereum-style 0x addresses are refused, each with its own message.
func ParseTronAddress(s string) (TronAddress, error) {
	if err := precheck(s, "address", 100); err != nil {
		return TronAddress{}, err
	}
	lower := strings.ToLower(s)
	switch {
	case strings.HasPrefix(lower, "0x"):
		return TronAddress{}, refuse(CodeEthereumAddress, "this is an Ethereum-style 0x address; USDT on TRON needs a TRON address, which starts with T", nil)
	case len(s) == 42 && strings.HasPrefix(s, "41") && isHex(s):
		return TronAddress{}, refuse(CodeUnknownFormat, "this is a TRON address in hex form; send its base58 form, which starts with T", nil)
	case strings.HasPrefix(lower, "tron:"):
		return TronAddress{}, refuse(CodeUnknownFormat, "send the bare address, not a tron: payment link", nil)
	case s[0] != 'T':
		return TronAddress{}, refuse(CodeUnknownFormat, "a TRON address starts with T", nil)
	}
	if err := base58Alphabet(s, "address"); err != nil {
		return TronAddress{}, err
	}
	if len(s) != tronAddressLen {
		return TronAddress{}, refuse(CodeMalformed, fmt.Sprintf("a TRON address has %d characters, this one has %d", tronAddressLen, len(s)), nil)
	}
	payload, version, err := base58.CheckDecode(s)
	switch {
	case errors.Is(err, base58.ErrChecksum):
		return TronAddress{}, refuse(CodeBadChecksum, "bad checksum: the address is mistyped", err)
	case err != nil:
		return TronAddress{}, refuse(CodeMalformed, "address is not valid base58check", err)
	case version != tronVersion || len(payload) != 20:
		return TronAddress{}, refuse(CodeUnknownFormat, "unknown address format: not a TRON address", nil)
	}
	var a TronAddress
	copy(a[:], payload)
	return a, nil
}

// TronAddressFromHex accepts the hex forms the node APIs use: "41" followed
// by 40 hex digits, or the bare or 0x-prefixed 20-byte form of event logs.
// It is for reading node answers, not user input.
func TronAddressFromHex(h string) (TronAddress, error) {
	h = strings.TrimPrefix(strings.TrimPrefix(h, "0x"), "0X")
	switch len(h) {
	case 42:
		if !strings.HasPrefix(h, "41") {
			return TronAddress{}, fmt.Errorf("hex TRON address %q does not start with 41", h)
		}
		h = h[2:]
	case 40:
	default:
		return TronAddress{}, fmt.Errorf("hex TRON address %q has the wrong length", h)
	}
	var a TronAddress
	if _, err := hex.Decode(a[:], []byte(h)); err != nil {
		return TronAddress{}, fmt.Errorf("hex TRON address %q: %w", h, err)
	}
	return a, nil
}

// String returns the base58check form (T...).
func (a TronAddress) String() string { return base58.CheckEncode(a[:], tronVersion) }

// Hex returns the 21-byte hex form the node APIs use: "41" + 40 hex digits.
func (a TronAddress) Hex() string { return "41" + hex.EncodeToString(a[:]) }

// EVMHex returns the bare 20-byte hex form used in event logs and ABI words.
func (a TronAddress) EVMHex() string { return hex.EncodeToString(a[:]) }

// IsZero reports whether a is the zero address.
func (a TronAddress) IsZero() bool { return a == TronAddress{} }

// MarshalText encodes the base58 form, so JSON carries T... strings.
func (a TronAddress) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalText accepts the base58 form, or a hex form from a node.
func (a *TronAddress) UnmarshalText(b []byte) error {
	s := string(b)
	if strings.HasPrefix(s, "T") {
		v, err := ParseTronAddress(s)
		if err != nil {
			return err
		}
		*a = v
		return nil
	}
	v, err := TronAddressFromHex(s)
	if err != nil {
		return err
	}
	*a = v
	return nil
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') && (c < 'A' || c > 'F') {
			return false
		}
	}
	return true
}
