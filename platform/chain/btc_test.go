package chain_test

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/btcsuite/btcd/btcutil"
	"github.com/btcsuite/btcd/btcutil/base58"
	"github.com/stretchr/testify/require"

	"svc/platform/chain"
)

var allNetworks = []chain.Network{chain.Mainnet, chain.Testnet, chain.Signet, chain.Regtest}

type segwitVector struct {
	Address      string `json:"address"`
	ScriptPubKey string `json:"script_pubkey"`
	Reason       string `json:"reason"`
}

type stringVector struct {
	String string `json:"string"`
	Hex    string `json:"hex"`
	Reason string `json:"reason"`
}

func (v stringVector) value(t *testing.T) string {
	if v.Hex == "" {
		return v.String
	}
	b, err := hex.DecodeString(v.Hex)
	require.NoError(t, err)
	return string(b)
}

type bipVectors struct {
	Source         string         `json:"source"`
	ValidBech32    []string       `json:"valid_bech32"`
	InvalidBech32  []stringVector `json:"invalid_bech32"`
	ValidBech32m   []string       `json:"valid_bech32m"`
	InvalidBech32m []stringVector `json:"invalid_bech32m"`
	Valid          []segwitVector `json:"valid_segwit_addresses"`
	Invalid        []segwitVector `json:"invalid_segwit_addresses"`
}

func loadBIP(t *testing.T, name string) bipVectors {
	t.Helper()
	raw, err := os.ReadFile("testdata/" + name)
	require.NoError(t, err)
	var v bipVectors
	require.NoError(t, json.Unmarshal(raw, &v))
	require.NotEmpty(t, v.Source)
	require.NotEmpty(t, v.Valid)
	require.NotEmpty(t, v.Invalid)
	return v
}

// networksOf returns the deployments a segwit vector belongs to, by its
// human-readable part.
func networksOf(addr string) []chain.Network {
	switch strings.ToLower(addr)[:2] {
	case "bc":
		return []chain.Network{chain.Mainnet}
	case "tb":
		return []chain.Network{chain.Testnet, chain.Signet}
	}
	return nil
}

func codeOf(t *testing.T, err error) chain.Code {
	t.Helper()
	var ce *chain.Error
	require.True(t, errors.As(err, &ce), "error %v is not a *chain.Error", err)
	require.NotEmpty(t, ce.Error(), "a refusal must say why")
	return ce.Code
}

// requireOutcome checks the error of a table case: with no code the case
// must succeed; with one, err must be a refusal with that code and, when
// message is set, exactly that message. It reports whether the case
// expected success, so that the caller checks what was parsed.
func requireOutcome(t *testing.T, err error, code chain.Code, message string) bool {
	t.Helper()
	if code == "" {
		require.NoError(t, err)
		return true
	}
	require.Error(t, err)
	require.Equal(t, code, codeOf(t, err), err.Error())
	if message != "" {
		require.Equal(t, message, err.Error())
	}
	return false
}

// witnessVersion reads the version out of a scriptPubKey: OP_0 or OP_1..OP_16.
func witnessVersion(t *testing.T, spk string) (int, int) {
	b, err := hex.DecodeString(spk)
	require.NoError(t, err)
	v := int(b[0])
	if v != 0 {
		v -= 0x50
	}
	return v, len(b) - 2
}

// requireAcceptedVector checks a valid segwit vector's address as parsed
// on network n: accepted, with the published scriptPubKey, and written
// back in lower case.
func requireAcceptedVector(t *testing.T, n chain.Network, vec segwitVector, a chain.BTCAddress, err error) {
	t.Helper()
	require.NoError(t, err, n.String())
	spk, err := a.ScriptPubKey()
	require.NoError(t, err)
	require.Equal(t, vec.ScriptPubKey, hex.EncodeToString(spk))
	require.Equal(t, strings.ToLower(vec.Address), a.String())
}

// addressCase is a Bitcoin address, the network it is parsed on, and the
// outcome: accepted (no code) as kind, or refused with code and, when set,
// exactly message.
type addressCase struct {
	name    string
	addr    string
	net     chain.Network
	kind    chain.AddressKind
	code    chain.Code
	message string
}

// runAddressCases parses each case in a subtest: an accepted address must
// read back the same and, with withKind, be of the case's kind.
func runAddressCases(t *testing.T, withKind bool, tests []addressCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, err := tt.net.ParseBTCAddress(tt.addr)
			if requireOutcome(t, err, tt.code, tt.message) {
				require.Equal(t, tt.addr, a.String())
				if withKind {
					require.Equal(t, tt.kind, a.Kind())
				}
			}
		})
	}
}

// runValidVectors runs check, in a subtest per valid segwit vector, on the
// address as each of the vector's networks parses it, with the witness
// version and program length of its published scriptPubKey.
func runValidVectors(t *testing.T, vecs []segwitVector, check func(t *testing.T, vec segwitVector, n chain.Network, a chain.BTCAddress, err error, ver, plen int)) {
	t.Helper()
	for _, vec := range vecs {
		t.Run("valid/"+vec.Address, func(t *testing.T) {
			t.Parallel()
			ver, plen := witnessVersion(t, vec.ScriptPubKey)
			for _, n := range networksOf(vec.Address) {
				a, err := n.ParseBTCAddress(vec.Address)
				check(t, vec, n, a, err, ver, plen)
			}
		})
	}
}

// runInvalidVectors runs a BIP's invalid segwit addresses, one subtest
// each: every network refuses them with the code of their reason.
func runInvalidVectors(t *testing.T, vecs []segwitVector) {
	t.Helper()
	for _, vec := range vecs {
		t.Run("invalid/"+vec.Reason+"/"+vec.Address, func(t *testing.T) {
			t.Parallel()
			requireRefusedEverywhere(t, vec.Address, bipReasonCodes[vec.Reason])
		})
	}
}

// TestBTCAddressBIP173 runs the segwit address vectors of BIP-173. Its
// version 0 addresses must be accepted on their network with the published
// scriptPubKey. Its version 1+ addresses carry a bech32 checksum, which
// BIP-350 has since made invalid, so they must be refused as bad checksums.
func TestBTCAddressBIP173(t *testing.T) {
	t.Parallel()
	v := loadBIP(t, "bip173.json")
	runValidVectors(t, v.Valid, func(t *testing.T, vec segwitVector, n chain.Network, a chain.BTCAddress, err error, ver, _ int) {
		if ver == 0 {
			requireAcceptedVector(t, n, vec, a, err)
			return
		}
		require.ErrorIs(t, err, chain.ErrBadChecksum, "superseded by BIP-350: v%d needs bech32m", ver)
	})
	runInvalidVectors(t, v.Invalid)
	for _, s := range append(v.ValidBech32, v.ValidBech32m...) {
		requireRefusedEverywhere(t, s, "") // a valid bech32 string is not an address
	}
	for _, vec := range v.InvalidBech32 {
		requireRefusedEverywhere(t, vec.value(t), "")
	}
}

// TestBTCAddressBIP350 runs the segwit address vectors of BIP-350. The BIP
// asks senders to accept every witness version; the service deliberately
// refuses versions 2 to 16 and version 1 programs that are not 32 bytes
// (no soft fork defines them: coins sent there can be taken by anyone), and
// says so with CodeUnsupported.
func TestBTCAddressBIP350(t *testing.T) {
	t.Parallel()
	v := loadBIP(t, "bip350.json")
	runValidVectors(t, v.Valid, func(t *testing.T, vec segwitVector, n chain.Network, a chain.BTCAddress, err error, ver, plen int) {
		if ver == 0 || (ver == 1 && plen == 32) {
			requireAcceptedVector(t, n, vec, a, err)
			if ver == 1 {
				require.Equal(t, chain.P2TR, a.Kind())
			}
			for _, other := range allNetworks {
				if !isIn(other, networksOf(vec.Address)) {
					_, err := other.ParseBTCAddress(vec.Address)
					require.ErrorIs(t, err, chain.ErrWrongNetwork, other.String())
				}
			}
			return
		}
		require.ErrorIs(t, err, chain.ErrUnsupported, "v%d, %d-byte program", ver, plen)
	})
	runInvalidVectors(t, v.Invalid)
	for _, s := range v.ValidBech32m {
		requireRefusedEverywhere(t, s, "")
	}
	for _, vec := range v.InvalidBech32m {
		requireRefusedEverywhere(t, vec.value(t), "")
	}
}

// bipReasonCodes is how each invalidity the BIPs list is reported.
var bipReasonCodes = map[string]chain.Code{
	"Invalid human-readable part":                               chain.CodeUnknownFormat,
	"Invalid checksum":                                          chain.CodeBadChecksum,
	"Invalid checksum (Bech32 instead of Bech32m)":              chain.CodeBadChecksum,
	"Invalid checksum (Bech32m instead of Bech32)":              chain.CodeBadChecksum,
	"Invalid character in checksum":                             chain.CodeInvalidCharacter,
	"Invalid witness version":                                   chain.CodeMalformed,
	"Invalid program length":                                    chain.CodeMalformed,
	"Invalid program length (1 byte)":                           chain.CodeMalformed,
	"Invalid program length (41 bytes)":                         chain.CodeMalformed,
	"Invalid program length for witness version 0 (per BIP141)": chain.CodeMalformed,
	"Mixed case":                            chain.CodeMixedCase,
	"zero padding of more than 4 bits":      chain.CodeMalformed,
	"Non-zero padding in 8-to-5 conversion": chain.CodeMalformed,
	"Empty data section":                    chain.CodeMalformed,
}

func requireRefusedEverywhere(t *testing.T, s string, code chain.Code) {
	t.Helper()
	for _, n := range allNetworks {
		_, err := n.ParseBTCAddress(s)
		require.Error(t, err, "%q on %s", s, n)
		got := codeOf(t, err)
		if code != "" {
			require.Equal(t, code, got, "%q on %s: %v", s, n, err)
		}
	}
}

func isIn(n chain.Network, ns []chain.Network) bool {
	for _, m := range ns {
		if m == n {
			return true
		}
	}
	return false
}

// TestBTCAddressBase58 covers P2PKH and P2SH, the network check on base58
// version bytes, and mistyped addresses.
func TestBTCAddressBase58(t *testing.T) {
	t.Parallel()
	runAddressCases(t, true, []addressCase{
		{name: "genesis P2PKH", addr: "1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfNa", net: chain.Mainnet, kind: chain.P2PKH},
		{name: "P2PKH from BOLT 11", addr: "1RustyRX2oai4EYYDpQGWvEL62BBGqN9T", net: chain.Mainnet, kind: chain.P2PKH},
		{name: "P2SH from BOLT 11", addr: "3EktnHQD7RiAE6uzMj2ZifT9YgRrkSgzQX", net: chain.Mainnet, kind: chain.P2SH},
		{name: "testnet P2PKH", addr: "mk2QpYatsKicvFVuTAQLBryyccRXMUaGHP", net: chain.Testnet, kind: chain.P2PKH},
		{name: "testnet P2PKH on signet", addr: "mk2QpYatsKicvFVuTAQLBryyccRXMUaGHP", net: chain.Signet, kind: chain.P2PKH},
		{name: "testnet P2PKH on regtest", addr: "mk2QpYatsKicvFVuTAQLBryyccRXMUaGHP", net: chain.Regtest, kind: chain.P2PKH},
		{name: "mainnet P2PKH on testnet", addr: "1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfNa", net: chain.Testnet, code: chain.CodeWrongNetwork, message: "address is for mainnet, this deployment uses testnet"},
		{name: "mainnet P2SH on regtest", addr: "3EktnHQD7RiAE6uzMj2ZifT9YgRrkSgzQX", net: chain.Regtest, code: chain.CodeWrongNetwork},
		{name: "testnet P2PKH on mainnet", addr: "mk2QpYatsKicvFVuTAQLBryyccRXMUaGHP", net: chain.Mainnet, code: chain.CodeWrongNetwork, message: "address is for testnet, signet or regtest, this deployment uses mainnet"},
		{name: "mistyped last character", addr: "1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfNb", net: chain.Mainnet, code: chain.CodeBadChecksum, message: "bad checksum: the address is mistyped"},
		{name: "swapped characters", addr: "1A1zP1eP5QGefi2DMPTfTL5SLmv7DivNfa", net: chain.Mainnet, code: chain.CodeBadChecksum},
		{name: "character outside base58", addr: "1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfN0", net: chain.Mainnet, code: chain.CodeInvalidCharacter},
		{name: "truncated", addr: "1A1zP1eP5QGefi2DMPTfTL5SLmv7Divf", net: chain.Mainnet, code: chain.CodeBadChecksum},
		{name: "TRON address", addr: "TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t", net: chain.Mainnet, code: chain.CodeWrongKind, message: "this is a TRON address, not a Bitcoin address"},
		{name: "Ethereum address", addr: "0xa614f803b6fd780986a42c78ec9c7f77e6ded13c", net: chain.Mainnet, code: chain.CodeEthereumAddress},
		{name: "Lightning invoice", addr: "lnbc2500u1pvjluezpp5", net: chain.Mainnet, code: chain.CodeWrongKind},
		{name: "payment link", addr: "bitcoin:1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfNa", net: chain.Mainnet, code: chain.CodeUnknownFormat},
		{name: "empty", addr: "", net: chain.Mainnet, code: chain.CodeMalformed, message: "address is empty"},
		{name: "leading space", addr: " 1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfNa", net: chain.Mainnet, code: chain.CodeInvalidCharacter},
		{name: "trailing newline", addr: "1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfNa\n", net: chain.Mainnet, code: chain.CodeInvalidCharacter},
		{name: "too long", addr: strings.Repeat("1", 91), net: chain.Mainnet, code: chain.CodeUnknownFormat},
		{name: "compressed public key", addr: "0279be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798", net: chain.Mainnet, code: chain.CodeInvalidCharacter},
		{name: "uncompressed public key without a 0", addr: strings.Repeat("4", 130), net: chain.Mainnet, code: chain.CodeUnknownFormat},
	})
}

// TestBTCAddressSegwitNetworks checks each segwit prefix against each
// deployment, including regtest's bcrt and the anyone-can-spend P2A output.
func TestBTCAddressSegwitNetworks(t *testing.T) {
	t.Parallel()
	prog := make([]byte, 20)
	for i := range prog {
		prog[i] = byte(i + 1)
	}
	rt, err := btcutil.NewAddressWitnessPubKeyHash(prog, chain.Regtest.Params())
	require.NoError(t, err)
	regtestAddr := rt.EncodeAddress()
	require.True(t, strings.HasPrefix(regtestAddr, "bcrt1q"))

	runAddressCases(t, false, []addressCase{
		{name: "regtest on regtest", addr: regtestAddr, net: chain.Regtest},
		{name: "regtest on mainnet", addr: regtestAddr, net: chain.Mainnet, code: chain.CodeWrongNetwork, message: "address is for regtest, this deployment uses mainnet"},
		{name: "testnet on mainnet", addr: "tb1qrp33g0q5c5txsp9arysrx4k6zdkfs4nce4xj0gdcccefvpysxf3q0sl5k7", net: chain.Mainnet, code: chain.CodeWrongNetwork, message: "address is for testnet or signet, this deployment uses mainnet"},
		{name: "testnet on regtest", addr: "tb1qrp33g0q5c5txsp9arysrx4k6zdkfs4nce4xj0gdcccefvpysxf3q0sl5k7", net: chain.Regtest, code: chain.CodeWrongNetwork},
		{name: "mainnet on testnet", addr: "bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4", net: chain.Testnet, code: chain.CodeWrongNetwork, message: "address is for mainnet, this deployment uses testnet"},
		{name: "mainnet P2WSH", addr: "bc1qrp33g0q5c5txsp9arysrx4k6zdkfs4nce4xj0gdcccefvpysxf3qccfmv3", net: chain.Mainnet},
		{name: "mistyped P2WSH", addr: "bc1qrp33g0q5c5txsp9arysrx4k6zdkfs4nce4xj0gdcccefvpysxf3qccfmv4", net: chain.Mainnet, code: chain.CodeBadChecksum},
		{name: "bech32 with b", addr: "bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3tb", net: chain.Mainnet, code: chain.CodeInvalidCharacter},
		{name: "pay-to-anchor", addr: "bc1pfeessrawgf", net: chain.Mainnet, code: chain.CodeUnsupported},
	})
}

// TestBTCAddressEveryTypo mutates every character of valid addresses of
// each kind: no single substitution may be accepted.
func TestBTCAddressEveryTypo(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{
		"1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfNa",
		"3EktnHQD7RiAE6uzMj2ZifT9YgRrkSgzQX",
		"bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4",
		"bc1p0xlxvlhemja6c4dqv22uapctqupfhlxm9h8z3k2e72q4k9hcz7vqzk5jj0",
	} {
		for i := range len(addr) {
			for _, c := range []byte("qpzry9x8A3") {
				if addr[i] == c {
					continue
				}
				typo := addr[:i] + string(c) + addr[i+1:]
				_, err := chain.Mainnet.ParseBTCAddress(typo)
				require.Error(t, err, "typo %q of %q accepted", typo, addr)
			}
		}
	}
}

func TestParseNetwork(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"mainnet", "testnet", "signet", "regtest"} {
		n, err := chain.ParseNetwork(name)
		require.NoError(t, err)
		require.Equal(t, name, n.String())
		require.False(t, n.IsZero())
	}
	for _, name := range []string{"", "main", "testnet4", "Mainnet"} {
		_, err := chain.ParseNetwork(name)
		require.Error(t, err, name)
	}
}

// base58Version is a helper for tests that need a raw base58check string.
func base58Version(payload []byte, v byte) string { return base58.CheckEncode(payload, v) }

func TestBTCAddressUnknownVersionByte(t *testing.T) {
	t.Parallel()
	s := base58Version(make([]byte, 20), 0x30) // Litecoin's P2PKH version
	_, err := chain.Mainnet.ParseBTCAddress(s)
	require.ErrorIs(t, err, chain.ErrUnknownFormat)
}
