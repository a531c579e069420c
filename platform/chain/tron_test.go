package chain_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/platform/chain"
)

func TestTronAddressKnownGood(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, addr, hex string
	}{
		// The USDT contracts on mainnet and Nile, with their hex forms.
		{name: "mainnet USDT contract", addr: "TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t", hex: "41a614f803b6fd780986a42c78ec9c7f77e6ded13c"},
		{name: "Nile testnet USDT contract", addr: "TXLAQ63Xg1NAzckPwKHvzw7CSEmLMEqcdj", hex: "41ea51342dabbb928ae1e576bd39eff8aaf070a8c6"},
		// The all-zero account, TRON's burn address.
		{name: "zero address", addr: "T9yD14Nj9j7xAB4dbGeiX9h8unkKHxuWwb", hex: "410000000000000000000000000000000000000000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, err := chain.ParseTronAddress(tt.addr)
			require.NoError(t, err)
			require.Equal(t, tt.addr, a.String())
			require.Equal(t, tt.hex, a.Hex())
			require.Equal(t, tt.hex[2:], a.EVMHex())

			for _, h := range []string{tt.hex, tt.hex[2:], "0x" + tt.hex[2:]} {
				b, err := chain.TronAddressFromHex(h)
				require.NoError(t, err, h)
				require.Equal(t, a, b, h)
			}
			js, err := json.Marshal(a)
			require.NoError(t, err)
			require.Equal(t, `"`+tt.addr+`"`, string(js))
			var back chain.TronAddress
			require.NoError(t, json.Unmarshal(js, &back))
			require.Equal(t, a, back)
		})
	}
}

func TestTronAddressRefused(t *testing.T) {
	t.Parallel()
	const good = "TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t"
	tests := []struct {
		name    string
		addr    string
		code    chain.Code
		message string
	}{
		{name: "last character mistyped", addr: good[:33] + "u", code: chain.CodeBadChecksum, message: "bad checksum: the address is mistyped"},
		{name: "two characters swapped", addr: "TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLjt6", code: chain.CodeBadChecksum},
		{name: "middle character mistyped", addr: strings.Replace(good, "q8Z", "q9Z", 1), code: chain.CodeBadChecksum},
		{name: "character dropped", addr: good[:20] + good[21:], code: chain.CodeMalformed, message: "a TRON address has 34 characters, this one has 33"},
		{name: "character added", addr: good + "a", code: chain.CodeMalformed},
		{name: "O for 0", addr: strings.Replace(good, "o", "O", 1), code: chain.CodeInvalidCharacter},
		{name: "l in place of 1", addr: "TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLjl6", code: chain.CodeInvalidCharacter},
		{name: "lower-case t", addr: "t" + good[1:], code: chain.CodeUnknownFormat, message: "a TRON address starts with T"},
		{name: "Ethereum address", addr: "0xa614f803b6fd780986a42c78ec9c7f77e6ded13c", code: chain.CodeEthereumAddress, message: "this is an Ethereum-style 0x address; USDT on TRON needs a TRON address, which starts with T"},
		{name: "Ethereum address upper case", addr: "0XA614F803B6FD780986A42C78EC9C7F77E6DED13C", code: chain.CodeEthereumAddress},
		{name: "hex TRON address", addr: "41a614f803b6fd780986a42c78ec9c7f77e6ded13c", code: chain.CodeUnknownFormat},
		{name: "Bitcoin address", addr: "1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfNa", code: chain.CodeUnknownFormat},
		{name: "payment link", addr: "tron:" + good, code: chain.CodeUnknownFormat},
		{name: "trailing space", addr: good + " ", code: chain.CodeInvalidCharacter},
		{name: "empty", addr: "", code: chain.CodeMalformed},
		// Valid base58check with another version byte that happens to start with T.
		{name: "wrong version byte", addr: base58Version(make([]byte, 20), 0x42), code: chain.CodeUnknownFormat},
		{name: "short payload", addr: base58Version(make([]byte, 19), 0x41), code: chain.CodeUnknownFormat},
		{name: "long payload", addr: base58Version(make([]byte, 21), 0x41), code: chain.CodeUnknownFormat},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := chain.ParseTronAddress(tt.addr)
			require.Error(t, err, tt.addr)
			require.Equal(t, tt.code, codeOf(t, err), "%q: %v", tt.addr, err)
			if tt.message != "" {
				require.Equal(t, tt.message, err.Error())
			}
		})
	}
}

// TestTronAddressEveryTypo substitutes every character of the USDT contract
// address with every other base58 character: none may be accepted.
func TestTronAddressEveryTypo(t *testing.T) {
	t.Parallel()
	const good = "TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t"
	const alphabet = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
	for i := 1; i < len(good); i++ {
		for _, c := range []byte(alphabet) {
			if c == good[i] {
				continue
			}
			typo := good[:i] + string(c) + good[i+1:]
			_, err := chain.ParseTronAddress(typo)
			require.Error(t, err, "typo %q accepted", typo)
		}
	}
}

func TestTronAddressFromHexRefuses(t *testing.T) {
	t.Parallel()
	for _, h := range []string{"", "41", "42a614f803b6fd780986a42c78ec9c7f77e6ded13c", "a614f803b6fd780986a42c78ec9c7f77e6ded1", "zz14f803b6fd780986a42c78ec9c7f77e6ded13c"} {
		_, err := chain.TronAddressFromHex(h)
		require.Error(t, err, h)
	}
}
