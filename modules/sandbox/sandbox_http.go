package sandbox

import (
	"context"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"

	"svc/modules/apikey"
	"svc/modules/deposit"
	"svc/modules/withdrawal"
	"svc/platform/chain"
	"svc/platform/fault"
	"svc/platform/httpapi"
	"svc/platform/money"
)

// Routes registers the helpers on the /v1 router; idem is the
// Idempotency-Key middleware. Each answers 404, as an unknown route, while
// the simulator is not there (Simulator.Present), and needs a key that
// allows readwrite calls.
//
//	POST /test_helpers/deposits/{deposit_id}/pay              Deposit
//	POST /test_helpers/deposits/{deposit_id}/confirm          Deposit
//	POST /test_helpers/deposits/{deposit_id}/expire           Deposit
//	POST /test_helpers/withdrawals/{withdrawal_id}/broadcast  Withdrawal
//	POST /test_helpers/withdrawals/{withdrawal_id}/confirm    Withdrawal
//	POST /test_helpers/withdrawals/{withdrawal_id}/fail       Withdrawal
//	POST /test_helpers/withdrawals/{withdrawal_id}/stall      Withdrawal
//	POST /test_helpers/tron/transfers                         {txid, from, to, amount}
//	POST /test_helpers/fee_rate                               {sat_per_vbyte}
func (s *Service) Routes(platform fiber.Router, idem fiber.Handler) {
	gate := s.gate
	platform.Post("/test_helpers/deposits/:deposit_id/pay", gate, idem, s.handlePay)
	platform.Post("/test_helpers/deposits/:deposit_id/confirm", gate, idem, s.handleDeposit(s.ConfirmDeposit))
	platform.Post("/test_helpers/deposits/:deposit_id/expire", gate, idem, s.handleDeposit(s.ExpireDeposit))
	platform.Post("/test_helpers/withdrawals/:withdrawal_id/broadcast", gate, idem, s.handlePayout(PayoutBroadcast))
	platform.Post("/test_helpers/withdrawals/:withdrawal_id/confirm", gate, idem, s.handlePayout(PayoutConfirm))
	platform.Post("/test_helpers/withdrawals/:withdrawal_id/fail", gate, idem, s.handlePayout(PayoutFail))
	platform.Post("/test_helpers/withdrawals/:withdrawal_id/stall", gate, idem, s.handlePayout(PayoutStall))
	platform.Post("/test_helpers/tron/transfers", gate, idem, s.handleTronTransfer)
	platform.Post("/test_helpers/fee_rate", gate, idem, s.handleFeeRate)
}

// gate answers 404 while the simulator is not there, and 403 to a key
// whose scope does not allow readwrite calls.
func (s *Service) gate(c *fiber.Ctx) error {
	if !s.Sim.Present(c.UserContext()) {
		return ErrOff
	}
	if k, ok := apikey.FromCtx(c); !ok || !k.Scope.Allows(apikey.ScopeReadWrite, c.Method()) {
		return ErrScope
	}
	return c.Next()
}

// ErrScope refuses a key that may not make readwrite calls (a read_only
// key): the helpers change state.
var ErrScope = fault.New(fault.Forbidden, "the test helpers need a key of scope readwrite")

// The request bodies. openapi.json states their fields, types and lengths
// (httpapi.Validator); the handlers check only what it cannot say.
type payRequest struct {
	Amounts   []string `json:"amounts"`
	Confirmed bool     `json:"confirmed"`
}

type broadcastRequest struct {
	Txid string `json:"txid"`
}

type tronTransferRequest struct {
	From   string `json:"from"`
	To     string `json:"to"`
	Amount string `json:"amount"`
	Txid   string `json:"txid"`
}

type feeRateRequest struct {
	SatPerVbyte string `json:"sat_per_vbyte"`
}

// TronTransferView answers the TRON transfer helper.
type TronTransferView struct {
	Txid   string `json:"txid"`
	From   string `json:"from"`
	To     string `json:"to"`
	Amount string `json:"amount"` // micro-USDT, an integer string
}

// FeeRateView answers the fee-rate helper.
type FeeRateView struct {
	SatPerVbyte string `json:"sat_per_vbyte"`
}

func depositParam(c *fiber.Ctx) (uuid.UUID, error) {
	id, err := uuid.Parse(httpapi.Param(c, "deposit_id"))
	if err != nil {
		return uuid.Nil, deposit.ErrNotFound
	}
	return id, nil
}

func (s *Service) handlePay(c *fiber.Ctx) error {
	id, err := depositParam(c)
	if err != nil {
		return err
	}
	var req payRequest
	if err := httpapi.Bind(c, &req); err != nil {
		return err
	}
	p := PayParams{Confirmed: req.Confirmed}
	var f httpapi.Fields
	for i, raw := range req.Amounts {
		n, err := money.ParseUnits(raw, true)
		if err != nil {
			f.Add([]any{"body", "amounts", i}, "value_error", err.Error(), raw)
			continue
		}
		p.Amounts = append(p.Amounts, n)
	}
	if err := f.Err(); err != nil {
		return err
	}
	v, err := s.PayDeposit(c.UserContext(), id, p)
	if err != nil {
		return err
	}
	return c.JSON(v)
}

// handleDeposit answers a deposit helper without parameters.
func (s *Service) handleDeposit(do func(context.Context, uuid.UUID) (deposit.View, error)) fiber.Handler {
	return func(c *fiber.Ctx) error {
		id, err := depositParam(c)
		if err != nil {
			return err
		}
		if err := httpapi.Bind(c, &struct{}{}); err != nil {
			return err
		}
		v, err := do(c.UserContext(), id)
		if err != nil {
			return err
		}
		return c.JSON(v)
	}
}

func (s *Service) handlePayout(action string) fiber.Handler {
	return func(c *fiber.Ctx) error {
		id, err := uuid.Parse(httpapi.Param(c, "withdrawal_id"))
		if err != nil {
			return withdrawal.ErrNotFound
		}
		var req broadcastRequest // the others' bodies are {}
		if err := httpapi.Bind(c, &req); err != nil {
			return err
		}
		if action != PayoutBroadcast {
			req.Txid = ""
		}
		v, err := s.Payout(c.UserContext(), id, action, req.Txid)
		if err != nil {
			return err
		}
		return c.JSON(v)
	}
}

func (s *Service) handleTronTransfer(c *fiber.Ctx) error {
	var req tronTransferRequest
	if err := httpapi.Bind(c, &req); err != nil {
		return err
	}
	var f httpapi.Fields
	if req.From == "" {
		req.From = s.Withdrawals.Config.HotWallet
		if req.From == "" {
			f.Add([]any{"body", "from"}, "missing", "from is required where TRON_HOT_WALLET is not set", nil)
		}
	}
	for _, a := range []struct{ field, v string }{{"from", req.From}, {"to", req.To}} {
		if a.v == "" {
			continue
		}
		if _, err := chain.ParseTronAddress(a.v); err != nil {
			f.Add([]any{"body", a.field}, "value_error", err.Error(), a.v)
		}
	}
	amount, err := money.ParseUnits(req.Amount, true)
	if err != nil {
		f.Add([]any{"body", "amount"}, "value_error", err.Error(), req.Amount)
	}
	if err := f.Err(); err != nil {
		return err
	}
	txid, err := s.TronTransfer(c.UserContext(), req.From, req.To, amount, req.Txid)
	if err != nil {
		return err
	}
	return c.JSON(TronTransferView{Txid: txid, From: req.From, To: req.To, Amount: req.Amount})
}

func (s *Service) handleFeeRate(c *fiber.Ctx) error {
	var req feeRateRequest
	if err := httpapi.Bind(c, &req); err != nil {
		return err
	}
	if err := s.SetFeeRate(c.UserContext(), req.SatPerVbyte); err != nil {
		return err
	}
	return c.JSON(FeeRateView{SatPerVbyte: req.SatPerVbyte})
}
