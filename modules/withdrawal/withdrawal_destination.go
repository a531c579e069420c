package withdrawal

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/schema"

	"svc/modules/asset"
	"svc/modules/deposit"
	"svc/platform/chain"
	"svc/platform/fault"
)

// Destination is a checked withdrawal destination.
type Destination struct {
	// Canonical is what is stored and paid: lower-case bech32 and BOLT11,
	// the base58 form of a TRON address.
	Canonical string
	// Invoice is the decoded BOLT11 invoice of a BTC_LN withdrawal.
	Invoice *chain.Invoice
}

// refused makes a destination refusal the SPEC's 422 {detail: string}.
func refused(err error) error {
	var ce *chain.Error
	if errors.As(err, &ce) {
		return fault.Wrap(fault.Invalid, "destination_address refused: "+ce.Msg, err)
	}
	return fault.Wrap(fault.Invalid, "destination_address refused: "+err.Error(), err)
}

// ErrOwnAddress: the destination is one of the service's own addresses.
var ErrOwnAddress = fault.New(fault.Invalid,
	"destination_address refused: it is one of this service's own deposit addresses; withdraw to an address outside the service")

// parseDestination checks raw as a destination of the asset code on the
// deployment's network at now (syntax, checksum, network, invoice life)
// and refuses the service's own USDT addresses, without the database. The
// caller refuses the service's own deposit addresses (spellings, read with
// the asset in one statement: assetAndIssued) and checks the BOLT11 amount,
// knowing the net.
func (s *Service) parseDestination(code, raw string, now time.Time) (Destination, error) {
	var d Destination
	switch code {
	case asset.BTC:
		addr, err := s.Config.Network.ParseBTCAddress(raw)
		if err != nil {
			return Destination{}, refused(err)
		}
		d.Canonical = addr.String()
	case asset.BTCLN:
		inv, err := s.Config.Network.ValidateBOLT11(raw, now)
		if err != nil {
			return Destination{}, refused(err)
		}
		d.Canonical, d.Invoice = inv.String(), &inv
	case asset.USDTTRC20:
		addr, err := chain.ParseTronAddress(raw)
		if err != nil {
			return Destination{}, refused(err)
		}
		d.Canonical = addr.String()
		for _, own := range s.Config.USDTPool {
			if own == d.Canonical {
				return Destination{}, ErrOwnAddress
			}
		}
		if s.Config.HotWallet != "" && s.Config.HotWallet == d.Canonical {
			return Destination{}, fault.New(fault.Invalid, "destination_address refused: it is the service's own hot wallet")
		}
	default:
		return Destination{}, fmt.Errorf("withdrawal: no destination rule for asset %s", code)
	}
	return d, nil
}

// spellings are the forms of a parsed destination that the service's own
// deposit addresses are looked up by: as sent, as the processor gave them
// and canonical (bech32 is case-insensitive).
func (d Destination) spellings(raw string) []string {
	return []string{raw, d.Canonical, strings.ToLower(raw)}
}

// keyClaimer is a Completer whose Idempotency-Key is claimed in the
// creation's first statement (*idempotency.Record under
// idempotency.ClaimInHandler).
type keyClaimer interface {
	ClaimExpr() schema.QueryWithArgs
	Claimed(ok bool) error
}

// firstRead is what a creation's first statement returns.
type firstRead struct {
	asset  asset.Asset
	issued bool
	// reserved is the asset's rolling 24-hour volume including this
	// withdrawal when the statement reserved it (gate (b)), else nil.
	reserved *int64
}

// assetAndIssued claims the request's Idempotency-Key when rec holds one
// to claim, then reads the asset code and whether any of spellings was
// ever issued for a deposit (deposit.IssuedExpr), all in one statement on
// the pool: every withdrawal request needs the three, and on two cores
// under load a statement and its round trip are a measurable part of a
// creation (docs/performance.md). With no spellings the lookup is false.
// idempotency.ErrNotClaimed when the key was there already (nothing else
// is looked at then), asset.ErrUnknown when there is no such asset.
//
// When the key is claimed by this statement (and only then: a replayed
// key must not count twice), the asset is enabled, gross is at least its
// minimum and the destination parsed (destOK) and was never issued, the
// same statement also reserves gross in the asset's rolling volume
// (withdrawal_window_add, as windowReserve does, locking the asset's
// window row for this one statement only): one round trip and one commit
// fewer for every accepted request. Its commit is asynchronous, as the
// claim's is (idempotency_claim turns it off for the statement's own
// transaction, which writes nothing else). A request refused after it
// (its fee, the dust limit, a BOLT11 amount) gives the reservation back.
func (s *Service) assetAndIssued(ctx context.Context, code string, spellings []string, rec Completer, gross int64, destOK bool, now time.Time) (firstRead, error) {
	claim := bun.SafeQuery("true")
	kc, claiming := rec.(keyClaimer)
	if claiming {
		claim = kc.ClaimExpr()
	}
	var row struct {
		Claimed     bool `bun:"claimed,scanonly"`
		asset.Asset `bun:",extend"`
		Issued      bool   `bun:"issued,scanonly"`
		Reserved    *int64 `bun:"reserved,scanonly"`
	}
	// The claim runs whether or not the asset exists: a row always comes
	// back, the asset's columns NULL when there is none. The inner select
	// is not flattened into the outer (it calls a volatile function), so
	// the claim is evaluated once, before the reservation's condition.
	reserve := claiming && destOK
	err := s.DB.NewSelect().Model(&row).
		ModelTableExpr(`(SELECT claim.claimed, asset.*, ? AS issued
   FROM (SELECT ? AS claimed) AS claim LEFT JOIN assets AS asset ON asset.asset = ?) AS asset`,
			deposit.IssuedExpr(spellings...), claim, code).
		ColumnExpr("asset.*").
		ColumnExpr(`CASE WHEN ? AND asset.claimed AND asset.enabled AND ? >= asset.withdrawal_min AND NOT asset.issued
   THEN withdrawal_window_add(asset.asset, ?, ?) END AS reserved`, reserve, gross, gross, now).
		Scan(ctx)
	if err != nil {
		return firstRead{}, fmt.Errorf("read asset %s: %w", code, err)
	}
	if claiming {
		if err := kc.Claimed(row.Claimed); err != nil {
			return firstRead{}, err
		}
	}
	if row.Code == "" {
		return firstRead{}, asset.ErrUnknown
	}
	return firstRead{asset: row.Asset, issued: row.Issued, reserved: row.Reserved}, nil
}

// canonical is raw as a destination of asset code would be stored, or raw
// itself when it does not parse (then it matches no stored destination).
func (s *Service) canonical(code, raw string) string {
	switch code {
	case asset.BTC:
		if a, err := s.Config.Network.ParseBTCAddress(raw); err == nil {
			return a.String()
		}
	case asset.BTCLN:
		if inv, err := s.Config.Network.DecodeBOLT11(raw); err == nil {
			return inv.String()
		}
	case asset.USDTTRC20:
		if a, err := chain.ParseTronAddress(raw); err == nil {
			return a.String()
		}
	}
	return raw
}
