package withdrawal

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

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

// destination checks raw as a destination of asset a on the deployment's
// network at now (syntax, checksum, network, invoice life) and refuses
// the service's own addresses. The BOLT11 amount is checked by the caller,
// which knows the net.
func (s *Service) destination(ctx context.Context, a asset.Asset, raw string, now time.Time) (Destination, error) {
	var d Destination
	switch a.Code {
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
		return Destination{}, fmt.Errorf("withdrawal: no destination rule for asset %s", a.Code)
	}
	// The service's own deposit addresses, as the processor gave them and
	// in canonical form (bech32 is case-insensitive), in one lookup.
	own, err := deposit.IsDepositAddress(ctx, s.DB, raw, d.Canonical, strings.ToLower(raw))
	if err != nil {
		return Destination{}, err
	}
	if own {
		return Destination{}, ErrOwnAddress
	}
	return d, nil
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
