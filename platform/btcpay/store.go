package btcpay

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
)

// Payment (and payout) method ids as Greenfield 2.x writes them.
const (
	MethodBTCChain = "BTC-CHAIN"
	MethodBTCLN    = "BTC-LN"
	MethodBTCLNURL = "BTC-LNURL"
	MethodUSDTTron = "USDT-TRON" // the USDt plugin's TRON method
)

// NormalizeMethodID returns the 2.x form of a payment method id, upper
// case: BTCPay compares ids case-insensitively, accepts "-" or "_" as the
// separator, and 1.x wrote BTC for BTC-CHAIN and BTC-LightningNetwork (or
// BTC_LightningLike) for BTC-LN.
func NormalizeMethodID(id string) string {
	s := strings.ToUpper(strings.TrimSpace(id))
	cur, typ, ok := strings.Cut(strings.ReplaceAll(s, "_", "-"), "-")
	if !ok {
		return cur + "-CHAIN" // a bare crypto code is its on-chain method
	}
	switch typ {
	case "LIGHTNINGLIKE", "LIGHTNINGNETWORK", "OFFCHAIN", "OFF-CHAIN", "LN":
		return cur + "-LN"
	case "BITCOINLIKE", "ONCHAIN", "BTCLIKE", "ON-CHAIN", "CHAIN":
		return cur + "-CHAIN"
	case "LNURLPAY", "LNURL":
		return cur + "-LNURL"
	}
	return cur + "-" + typ
}

// SameMethod reports whether a and b name the same payment method.
func SameMethod(a, b string) bool { return NormalizeMethodID(a) == NormalizeMethodID(b) }

// StorePaymentMethod is one payment method of the store.
type StorePaymentMethod struct {
	PaymentMethodID string `json:"paymentMethodId"`
	Enabled         bool   `json:"enabled"`
}

// StorePaymentMethods lists the store's payment methods (only the enabled
// ones when asked). It needs only btcpay.store.canviewstoresettings, which
// also makes it the cheap authenticated call for readiness.
func (c *Client) StorePaymentMethods(ctx context.Context, onlyEnabled bool) ([]StorePaymentMethod, error) {
	q := url.Values{"onlyEnabled": {strconv.FormatBool(onlyEnabled)}}
	var raw json.RawMessage
	if err := c.call(ctx, "store payment methods", "GET", c.storePath("payment-methods"), q, nil, &raw); err != nil {
		return nil, err
	}
	return parseStoreMethods(raw)
}

// parseStoreMethods reads the 2.x array and, for an older server, the 1.x
// object keyed by method id.
func parseStoreMethods(raw json.RawMessage) ([]StorePaymentMethod, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '{' {
		var m map[string]struct {
			Enabled bool `json:"enabled"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, &UnreachableError{Op: "store payment methods", Err: err}
		}
		out := make([]StorePaymentMethod, 0, len(m))
		for id, v := range m {
			out = append(out, StorePaymentMethod{PaymentMethodID: NormalizeMethodID(id), Enabled: v.Enabled})
		}
		return out, nil
	}
	var out []StorePaymentMethod
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, &UnreachableError{Op: "store payment methods", Err: err}
	}
	return out, nil
}

// ServerInfo is BTCPay's server information.
type ServerInfo struct {
	Version                 string       `json:"version"`
	Onion                   string       `json:"onion"`
	SupportedPaymentMethods []string     `json:"supportedPaymentMethods"`
	FullySynched            bool         `json:"fullySynched"`
	SyncStatus              []SyncStatus `json:"syncStatus"`
}

// SyncStatus is the sync state of one payment method's node.
type SyncStatus struct {
	PaymentMethodID string  `json:"paymentMethodId"`
	Available       bool    `json:"available"`
	ChainHeight     FlexInt `json:"chainHeight"`
	SyncHeight      FlexInt `json:"syncHeight"`
}

// ServerInfo returns the server's version and supported payment methods
// (any valid key may read it).
func (c *Client) ServerInfo(ctx context.Context) (ServerInfo, error) {
	return callFor[ServerInfo](ctx, c, "server info", "GET", "/api/v1/server/info", nil, nil)
}
