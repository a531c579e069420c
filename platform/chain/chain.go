// Package chain owns the checks on what a user hands the service as a
// destination: Bitcoin addresses and BOLT11 invoices for the deployment's
// network, and TRON addresses for USDT. It knows no business rule; it says
// whether a string is a usable destination and, when it is not, why, in words
// an integrator can act on.
//
// Every refusal is an *Error with a Code (wrong network, bad checksum, ...)
// and a message. Accepted values come back in canonical form (lower-case
// bech32, the base58 TRON form) so that what is stored and sent on is exactly
// what was checked.
package chain

import (
	"fmt"

	"github.com/btcsuite/btcd/chaincfg"
)

// Network is the Bitcoin network a deployment runs on (BITCOIN_NETWORK).
type Network struct {
	name   string
	params *chaincfg.Params
}

// The networks a deployment can run on.
var (
	Mainnet = Network{name: "mainnet", params: &chaincfg.MainNetParams}
	Testnet = Network{name: "testnet", params: &chaincfg.TestNet3Params}
	Signet  = Network{name: "signet", params: &chaincfg.SigNetParams}
	Regtest = Network{name: "regtest", params: &chaincfg.RegressionNetParams}
)

// ParseNetwork returns the network named by a BITCOIN_NETWORK value.
func ParseNetwork(name string) (Network, error) {
	switch name {
	case "mainnet":
		return Mainnet, nil
	case "testnet":
		return Testnet, nil
	case "signet":
		return Signet, nil
	case "regtest":
		return Regtest, nil
	}
	return Network{}, fmt.Errorf("unknown bitcoin network %q: want mainnet, testnet, signet or regtest", name)
}

// String returns the network's configuration name ("mainnet", ...).
func (n Network) String() string { return n.name }

// Params returns the btcd parameters of the network, for code that encodes
// addresses or invoices (the simulator).
func (n Network) Params() *chaincfg.Params { return n.params }

// IsZero reports whether n is the zero Network (not parsed).
func (n Network) IsZero() bool { return n.params == nil }
