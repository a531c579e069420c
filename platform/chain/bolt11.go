package chain

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lightningnetwork/lnd/zpay32"
)

// MinInvoiceLife is the least remaining life a BOLT11 invoice must have to be
// accepted as a withdrawal destination (SPEC: about two minutes), so the
// payout has time to route before the invoice expires.
const MinInvoiceLife = 2 * time.Minute

// maxInvoiceLen is the SPEC's limit on destination_address; zpay32's own
// limit (7089) is above it.
const maxInvoiceLen = 2048

// invoicePrefixes maps each BOLT11 prefix to its network, longest first so
// that lnbcrt is not taken for lnbc and lntbs not for lntb.
var invoicePrefixes = []struct{ prefix, network string }{
	{"lnbcrt", "regtest"},
	{"lnbc", "mainnet"},
	{"lntbs", "signet"},
	{"lntb", "testnet"},
	{"lnsb", "simnet"},
}

// Invoice is a decoded BOLT11 invoice for the deployment's network.
type Invoice struct {
	raw string
	// AmountSat is the amount asked for, in satoshis; 0 when the invoice
	// carries no amount (HasAmount false).
	AmountSat int64
	HasAmount bool
	// CreatedAt is the invoice's timestamp; ExpiresAt is CreatedAt plus its
	// expiry (one hour when the invoice does not say).
	CreatedAt time.Time
	ExpiresAt time.Time
	// PaymentHash is the hex payment hash: the identity of the payment.
	PaymentHash string
	// Payee is the hex compressed public key of the receiving node.
	Payee string
	// Description is the short description, when the invoice has one
	// instead of a description hash.
	Description string
}

// String returns the invoice in lower case, the form that was checked.
func (inv Invoice) String() string { return inv.raw }

// DecodeBOLT11 checks that s is a BOLT11 invoice for network n that the
// service can pay: the signature verifies, the amount (if any) is whole
// satoshis, and it asks for no feature the node does not know. It does not
// look at the time; CheckLife does.
func (n Network) DecodeBOLT11(s string) (Invoice, error) {
	if err := precheck(s, "invoice", maxInvoiceLen); err != nil {
		return Invoice{}, err
	}
	lower := strings.ToLower(s)
	if err := notAnotherKindForBOLT11(s, lower); err != nil {
		return Invoice{}, err
	}
	net := invoiceNetwork(lower)
	if net == "" {
		return Invoice{}, refuse(CodeUnknownFormat, "not a BOLT11 invoice: it should start with lnbc, lntb, lntbs or lnbcrt", nil)
	}
	if net != n.name {
		return Invoice{}, refuse(CodeWrongNetwork, fmt.Sprintf("invoice is for %s, this deployment uses %s", net, n.name), nil)
	}
	inv, err := zpay32.Decode(s, n.params, zpay32.WithErrorOnUnknownFeatureBit())
	if err != nil {
		return Invoice{}, bolt11Refusal(err)
	}
	out := Invoice{raw: lower, CreatedAt: inv.Timestamp.UTC()}
	if inv.MilliSat != nil {
		msat := uint64(*inv.MilliSat)
		switch {
		case msat == 0:
			return Invoice{}, refuse(CodeMalformed, "invoice amount is zero; use an invoice without an amount instead", nil)
		case msat%1000 != 0:
			return Invoice{}, refuse(CodeSubSatoshi, fmt.Sprintf("invoice amount %d msat is not a whole number of satoshis", msat), nil)
		}
		out.AmountSat, out.HasAmount = int64(msat/1000), true // < 2^64/1000, fits
	}
	expiry := inv.Expiry()
	if expiry < 0 {
		// zpay32 multiplies the seconds into a time.Duration; a huge value
		// wraps around.
		return Invoice{}, refuse(CodeMalformed, "invoice expiry is out of range", nil)
	}
	out.ExpiresAt = out.CreatedAt.Add(expiry)
	if out.ExpiresAt.Before(out.CreatedAt) {
		return Invoice{}, refuse(CodeMalformed, "invoice expiry is out of range", nil)
	}
	if inv.PaymentHash == nil { // zpay32 refuses this already; keep the invariant local
		return Invoice{}, refuse(CodeMalformed, "invoice has no payment hash", nil)
	}
	out.PaymentHash = hex.EncodeToString(inv.PaymentHash[:])
	if inv.Destination != nil {
		out.Payee = hex.EncodeToString(inv.Destination.SerializeCompressed())
	}
	if inv.Description != nil {
		out.Description = *inv.Description
	}
	return out, nil
}

// CheckLife refuses an invoice that has expired at now, or that has less
// than min of life left.
func (inv Invoice) CheckLife(now time.Time, min time.Duration) error {
	left := inv.ExpiresAt.Sub(now)
	switch {
	case left <= 0:
		return refuse(CodeInvoiceExpired, "invoice expired at "+inv.ExpiresAt.UTC().Format(time.RFC3339), nil)
	case left < min:
		return refuse(CodeInvoiceExpiring, fmt.Sprintf("invoice has less than %s left (it expires at %s); ask for a new one", humanDuration(min), inv.ExpiresAt.UTC().Format(time.RFC3339)), nil)
	}
	return nil
}

// CheckAmount refuses an invoice whose amount differs from sats, the amount
// the service will pay. An invoice without an amount fits any.
func (inv Invoice) CheckAmount(sats int64) error {
	if inv.HasAmount && inv.AmountSat != sats {
		return refuse(CodeAmountMismatch, fmt.Sprintf("invoice is for %d sat, but %d sat would be paid; send an invoice for %d sat or one without an amount", inv.AmountSat, sats, sats), nil)
	}
	return nil
}

// ValidateBOLT11 decodes s for network n and checks that it has at least
// MinInvoiceLife left at now: the whole check for a withdrawal destination
// except the amount.
func (n Network) ValidateBOLT11(s string, now time.Time) (Invoice, error) {
	inv, err := n.DecodeBOLT11(s)
	if err != nil {
		return Invoice{}, err
	}
	if err := inv.CheckLife(now, MinInvoiceLife); err != nil {
		return Invoice{}, err
	}
	return inv, nil
}

// invoiceNetwork names the network of a lower-case invoice by its prefix, or
// "" when it has none of the known ones. The prefix must be followed by the
// amount (a digit) or the separator, so lnbcrt is never read as lnbc + "rt".
func invoiceNetwork(lower string) string {
	for _, p := range invoicePrefixes {
		rest, ok := strings.CutPrefix(lower, p.prefix)
		if ok && rest != "" && rest[0] >= '0' && rest[0] <= '9' {
			return p.network
		}
	}
	return ""
}

func looksLikeBOLT11(lower string) bool { return invoiceNetwork(lower) != "" }

func notAnotherKindForBOLT11(s, lower string) error {
	switch {
	case strings.HasPrefix(lower, "lightning:"):
		return refuse(CodeUnknownFormat, "send the bare invoice, without the lightning: prefix", nil)
	case strings.HasPrefix(lower, "lnurl"):
		return refuse(CodeUnsupported, "LNURL is not supported; send a BOLT11 invoice (it starts with lnbc)", nil)
	case strings.HasPrefix(lower, "lno1"), strings.HasPrefix(lower, "lni1"), strings.HasPrefix(lower, "lnr1"):
		return refuse(CodeUnsupported, "BOLT12 offers are not supported; send a BOLT11 invoice (it starts with lnbc)", nil)
	case strings.HasPrefix(lower, "bitcoin:"):
		return refuse(CodeWrongKind, "this is a bitcoin: payment link, not a Lightning invoice", nil)
	}
	if !strings.HasPrefix(lower, "ln") {
		for _, n := range []Network{Mainnet, Testnet, Regtest} {
			if _, err := n.ParseBTCAddress(s); err == nil || errors.Is(err, ErrWrongNetwork) {
				return refuse(CodeWrongKind, "this is a Bitcoin address, not a Lightning invoice", nil)
			}
		}
	}
	return nil
}

// bolt11Refusal turns zpay32's error into a sentence. zpay32 returns
// unexported error strings for most cases, so the common ones are matched by
// text; anything else is reported as a malformed invoice with its reason.
func bolt11Refusal(err error) *Error {
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "checksum failed"):
		return refuse(CodeBadChecksum, "bad checksum: the invoice is mistyped or cut short", err)
	case strings.Contains(msg, "not all lowercase or all uppercase"):
		return refuse(CodeMixedCase, "invoice mixes upper and lower case; use one case throughout", err)
	case strings.Contains(msg, "failed converting data to bytes"), strings.HasPrefix(msg, "invalid character"):
		return refuse(CodeInvalidCharacter, "invoice contains a character BOLT11 invoices do not use", err)
	case strings.Contains(msg, "unknown feature bits"):
		return refuse(CodeUnsupported, "invoice requires Lightning features this service does not support", err)
	case strings.Contains(msg, "signature"), strings.Contains(msg, "recover"):
		return refuse(CodeMalformed, "invoice signature does not verify", err)
	case strings.Contains(msg, "not expressible in msat"), strings.Contains(msg, "minimum amount is 10p"):
		return refuse(CodeSubSatoshi, "invoice amount is not a whole number of satoshis", err)
	case strings.Contains(msg, "unknown multiplier"), strings.Contains(msg, "amount"), strings.Contains(msg, "ParseUint"):
		return refuse(CodeMalformed, "invoice amount is malformed", err)
	case errors.Is(err, zpay32.ErrInvoiceTooLarge):
		return refuse(CodeMalformed, "invoice is too long", err)
	}
	return refuse(CodeMalformed, "invoice is malformed: "+msg, err)
}

func humanDuration(d time.Duration) string {
	switch {
	case d == time.Minute:
		return "1 minute"
	case d%time.Minute == 0:
		return fmt.Sprintf("%d minutes", int(d/time.Minute))
	}
	return d.String()
}
