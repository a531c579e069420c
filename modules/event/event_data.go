package event

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/google/uuid"

	"svc/modules/asset"
	"svc/platform/metadata"
)

// Data is the data of one event type. Each type has exactly one Data
// struct below; docs/events.schema.json describes the same shapes.
//
// Amounts are decimal strings in display units (asset.Format), never
// numbers. Every field is always present; optional values are null. The
// data of an event about a deposit or a withdrawal carries the resource's
// metadata and client_reference, as its API object shows them.
type Data interface {
	// Type is the event type the data belongs to.
	Type() Type
	validate(c *checker)
}

// DepositDetectedData: a payment to the deposit is visible but not yet
// credited.
type DepositDetectedData struct {
	DepositID       string            `json:"deposit_id"`
	ExternalUserID  *string           `json:"external_user_id"` // the user's; null for a platform account's
	PlatformAccount *string           `json:"platform_account"` // the platform account's; null for a user's
	Asset           string            `json:"asset"`
	Status          string            `json:"status"`
	PaymentID       string            `json:"payment_id"`
	Amount          string            `json:"amount"`           // the payment's amount
	Metadata        metadata.Metadata `json:"metadata"`         // the resource's labels ({} when none)
	ClientReference *string           `json:"client_reference"` // the platform's id of the resource, when given
}

// DepositSettledData: the deposit was credited to the ledger (the SPEC
// fixes its first five fields; the resource's labels follow, as in every
// deposit and withdrawal event).
type DepositSettledData struct {
	DepositID       string            `json:"deposit_id"`
	ExternalUserID  *string           `json:"external_user_id"` // the user's; null for a platform account's
	PlatformAccount *string           `json:"platform_account"` // the platform account's; null for a user's
	Asset           string            `json:"asset"`
	Status          string            `json:"status"`
	AmountCredited  string            `json:"amount_credited"`  // the sum of the credited payments
	Metadata        metadata.Metadata `json:"metadata"`         // the resource's labels ({} when none)
	ClientReference *string           `json:"client_reference"` // the platform's id of the resource, when given
}

// DepositReviewRequiredData: money arrived that needs an operator (a late
// payment, a payment after expiry, an amount that does not convert
// exactly, an invoice marked settled by hand).
type DepositReviewRequiredData struct {
	DepositID       string            `json:"deposit_id"`
	ExternalUserID  *string           `json:"external_user_id"` // the user's; null for a platform account's
	PlatformAccount *string           `json:"platform_account"` // the platform account's; null for a user's
	Asset           string            `json:"asset"`
	Status          string            `json:"status"`
	AmountCredited  string            `json:"amount_credited"`
	PaymentID       *string           `json:"payment_id"` // the payment in question, when there is one
	Amount          *string           `json:"amount"`     // its amount, when known
	ReviewReason    string            `json:"review_reason"`
	Metadata        metadata.Metadata `json:"metadata"`         // the resource's labels ({} when none)
	ClientReference *string           `json:"client_reference"` // the platform's id of the resource, when given
}

// DepositExpiredData: the deposit's window closed with nothing received.
type DepositExpiredData struct {
	DepositID       string            `json:"deposit_id"`
	ExternalUserID  *string           `json:"external_user_id"` // the user's; null for a platform account's
	PlatformAccount *string           `json:"platform_account"` // the platform account's; null for a user's
	Asset           string            `json:"asset"`
	Status          string            `json:"status"`
	Metadata        metadata.Metadata `json:"metadata"`         // the resource's labels ({} when none)
	ClientReference *string           `json:"client_reference"` // the platform's id of the resource, when given
}

// WithdrawalPendingApprovalData: a gate sent the withdrawal to an operator.
type WithdrawalPendingApprovalData struct {
	WithdrawalID    string            `json:"withdrawal_id"`
	ExternalUserID  *string           `json:"external_user_id"` // the user's; null for a platform account's
	PlatformAccount *string           `json:"platform_account"` // the platform account's; null for a user's
	Asset           string            `json:"asset"`
	Status          string            `json:"status"`
	AmountGross     string            `json:"amount_gross"`
	ApprovalReason  string            `json:"approval_reason"`
	Metadata        metadata.Metadata `json:"metadata"`         // the resource's labels ({} when none)
	ClientReference *string           `json:"client_reference"` // the platform's id of the resource, when given
}

// WithdrawalBroadcastData: the payout is on chain and its txid is known.
type WithdrawalBroadcastData struct {
	WithdrawalID    string            `json:"withdrawal_id"`
	ExternalUserID  *string           `json:"external_user_id"` // the user's; null for a platform account's
	PlatformAccount *string           `json:"platform_account"` // the platform account's; null for a user's
	Asset           string            `json:"asset"`
	Status          string            `json:"status"`
	AmountGross     string            `json:"amount_gross"`
	Fee             string            `json:"fee"`
	AmountNet       string            `json:"amount_net"`
	Txid            string            `json:"txid"`
	Metadata        metadata.Metadata `json:"metadata"`         // the resource's labels ({} when none)
	ClientReference *string           `json:"client_reference"` // the platform's id of the resource, when given
}

// WithdrawalCompletedData: the payout is confirmed. A Lightning payout has
// no txid.
type WithdrawalCompletedData struct {
	WithdrawalID    string            `json:"withdrawal_id"`
	ExternalUserID  *string           `json:"external_user_id"` // the user's; null for a platform account's
	PlatformAccount *string           `json:"platform_account"` // the platform account's; null for a user's
	Asset           string            `json:"asset"`
	Status          string            `json:"status"`
	AmountGross     string            `json:"amount_gross"`
	Fee             string            `json:"fee"`
	AmountNet       string            `json:"amount_net"`
	Txid            *string           `json:"txid"`
	Metadata        metadata.Metadata `json:"metadata"`         // the resource's labels ({} when none)
	ClientReference *string           `json:"client_reference"` // the platform's id of the resource, when given
}

// WithdrawalFailedData: the withdrawal will not proceed; the money is still
// held until an operator releases it. Fee and net are null when it failed
// before submission fixed them; txid is set when a transaction was seen.
type WithdrawalFailedData struct {
	WithdrawalID    string            `json:"withdrawal_id"`
	ExternalUserID  *string           `json:"external_user_id"` // the user's; null for a platform account's
	PlatformAccount *string           `json:"platform_account"` // the platform account's; null for a user's
	Asset           string            `json:"asset"`
	Status          string            `json:"status"`
	AmountGross     string            `json:"amount_gross"`
	Fee             *string           `json:"fee"`
	AmountNet       *string           `json:"amount_net"`
	Txid            *string           `json:"txid"`
	FailureReason   string            `json:"failure_reason"`
	Metadata        metadata.Metadata `json:"metadata"`         // the resource's labels ({} when none)
	ClientReference *string           `json:"client_reference"` // the platform's id of the resource, when given
}

// TransferCompletedData: a transfer committed, every leg moved; the
// Transfer object of the API (modules/transfer).
type TransferCompletedData struct {
	TransferID      string            `json:"transfer_id"`
	Status          string            `json:"status"`
	Legs            []TransferLegData `json:"legs"`
	Description     *string           `json:"description"`
	Metadata        map[string]string `json:"metadata"`
	ClientReference *string           `json:"client_reference"`
	CreatedAt       string            `json:"created_at"`
}

// TransferLegData is one leg of a transfer.
type TransferLegData struct {
	From   AccountRefData `json:"from"`
	To     AccountRefData `json:"to"`
	Asset  string         `json:"asset"`
	Amount string         `json:"amount"`
}

// AccountRefData names an account: a user or a platform account, exactly
// one of the two.
type AccountRefData struct {
	ExternalUserID  string `json:"external_user_id,omitempty"`
	PlatformAccount string `json:"platform_account,omitempty"`
}

// HoldCapture is one account a hold's capture paid.
type HoldCapture struct {
	To     AccountRefData `json:"to"`
	Amount string         `json:"amount"`
}

// HoldData is an escrow hold as GET /v1/holds/{hold_id} answers it
// (modules/hold).
type HoldData struct {
	HoldID          string            `json:"hold_id"`
	Status          string            `json:"status"`
	From            AccountRefData    `json:"from"`
	Asset           string            `json:"asset"`
	Amount          string            `json:"amount"`
	CapturedAmount  string            `json:"captured_amount"`
	ReleasedAmount  string            `json:"released_amount"`
	Captures        []HoldCapture     `json:"captures"`
	ExpiresAt       string            `json:"expires_at"`
	Description     *string           `json:"description"`
	Metadata        map[string]string `json:"metadata"`
	ClientReference *string           `json:"client_reference"`
	CreatedAt       string            `json:"created_at"`
	UpdatedAt       string            `json:"updated_at"`
}

// HoldCapturedData: the hold was captured (captures says to whom, and
// released_amount what went back to the payer).
type HoldCapturedData HoldData

// HoldVoidedData: the hold was voided; its amount is back in the payer's
// available balance.
type HoldVoidedData HoldData

// HoldExpiredData: the hold reached expires_at open and the expiry pass
// returned its amount to the payer.
type HoldExpiredData HoldData

// Type implements Data.
func (DepositDetectedData) Type() Type { return DepositDetected }

// Type implements Data.
func (DepositSettledData) Type() Type { return DepositSettled }

// Type implements Data.
func (DepositReviewRequiredData) Type() Type { return DepositReviewRequired }

// Type implements Data.
func (DepositExpiredData) Type() Type { return DepositExpired }

// Type implements Data.
func (WithdrawalPendingApprovalData) Type() Type { return WithdrawalPendingApproval }

// Type implements Data.
func (WithdrawalBroadcastData) Type() Type { return WithdrawalBroadcast }

// Type implements Data.
func (WithdrawalCompletedData) Type() Type { return WithdrawalCompleted }

// Type implements Data.
func (WithdrawalFailedData) Type() Type { return WithdrawalFailed }

// Type implements Data.
func (TransferCompletedData) Type() Type { return TransferCompleted }

// Type implements Data.
func (HoldCapturedData) Type() Type { return HoldCaptured }

// Type implements Data.
func (HoldVoidedData) Type() Type { return HoldVoided }

// Type implements Data.
func (HoldExpiredData) Type() Type { return HoldExpired }

// DataFor returns a zero value of the data struct of typ (nil for an
// unknown type); tests and tools use it to walk every type.
func DataFor(typ Type) Data {
	switch typ {
	case DepositDetected:
		return DepositDetectedData{}
	case DepositSettled:
		return DepositSettledData{}
	case DepositReviewRequired:
		return DepositReviewRequiredData{}
	case DepositExpired:
		return DepositExpiredData{}
	case WithdrawalPendingApproval:
		return WithdrawalPendingApprovalData{}
	case WithdrawalBroadcast:
		return WithdrawalBroadcastData{}
	case WithdrawalCompleted:
		return WithdrawalCompletedData{}
	case WithdrawalFailed:
		return WithdrawalFailedData{}
	case TransferCompleted:
		return TransferCompletedData{}
	case HoldCaptured:
		return HoldCapturedData{}
	case HoldVoided:
		return HoldVoidedData{}
	case HoldExpired:
		return HoldExpiredData{}
	}
	return nil
}

// The statuses a resource can be in (SPEC "States and transitions").
var (
	depositStatuses    = []string{"creating", "pending", "confirming", "settled", "expired", "review", "dismissed", "failed"}
	withdrawalStatuses = []string{"requested", "pending_approval", "approved", "rejected", "submitting", "submitted",
		"broadcast", "confirmed", "failed", "refunded"}
	holdStatuses = []string{"open", "captured", "voided", "expired"}
	assets       = []string{asset.BTC, asset.BTCLN, asset.USDTTRC20}
)

func (d DepositDetectedData) validate(c *checker) {
	c.deposit(d.DepositID, d.ExternalUserID, d.PlatformAccount, d.Asset, d.Status)
	c.text("payment_id", d.PaymentID)
	c.decimal("amount", d.Amount)
}

func (d DepositSettledData) validate(c *checker) {
	c.deposit(d.DepositID, d.ExternalUserID, d.PlatformAccount, d.Asset, d.Status)
	c.decimal("amount_credited", d.AmountCredited)
}

func (d DepositReviewRequiredData) validate(c *checker) {
	c.deposit(d.DepositID, d.ExternalUserID, d.PlatformAccount, d.Asset, d.Status)
	c.decimal("amount_credited", d.AmountCredited)
	c.optText("payment_id", d.PaymentID)
	c.optDecimal("amount", d.Amount)
	c.text("review_reason", d.ReviewReason)
}

func (d DepositExpiredData) validate(c *checker) {
	c.deposit(d.DepositID, d.ExternalUserID, d.PlatformAccount, d.Asset, d.Status)
}

func (d WithdrawalPendingApprovalData) validate(c *checker) {
	c.withdrawal(d.WithdrawalID, d.ExternalUserID, d.PlatformAccount, d.Asset, d.Status, d.AmountGross)
	c.text("approval_reason", d.ApprovalReason)
}

func (d WithdrawalBroadcastData) validate(c *checker) {
	c.withdrawal(d.WithdrawalID, d.ExternalUserID, d.PlatformAccount, d.Asset, d.Status, d.AmountGross)
	c.decimal("fee", d.Fee)
	c.decimal("amount_net", d.AmountNet)
	c.text("txid", d.Txid)
}

func (d WithdrawalCompletedData) validate(c *checker) {
	c.withdrawal(d.WithdrawalID, d.ExternalUserID, d.PlatformAccount, d.Asset, d.Status, d.AmountGross)
	c.decimal("fee", d.Fee)
	c.decimal("amount_net", d.AmountNet)
	c.optText("txid", d.Txid)
}

func (d WithdrawalFailedData) validate(c *checker) {
	c.withdrawal(d.WithdrawalID, d.ExternalUserID, d.PlatformAccount, d.Asset, d.Status, d.AmountGross)
	c.optDecimal("fee", d.Fee)
	c.optDecimal("amount_net", d.AmountNet)
	c.optText("txid", d.Txid)
	c.text("failure_reason", d.FailureReason)
}

func (d TransferCompletedData) validate(c *checker) {
	if u, err := uuid.Parse(d.TransferID); err != nil || u.String() != d.TransferID {
		c.add("transfer_id %q is not a lowercase uuid", d.TransferID)
	}
	c.oneOf("status", d.Status, []string{"completed"})
	if len(d.Legs) == 0 {
		c.add("legs is empty")
	}
	for i, l := range d.Legs {
		c.account(fmt.Sprintf("legs[%d].from", i), l.From)
		c.account(fmt.Sprintf("legs[%d].to", i), l.To)
		c.oneOf(fmt.Sprintf("legs[%d].asset", i), l.Asset, assets)
		c.decimal(fmt.Sprintf("legs[%d].amount", i), l.Amount)
	}
	if d.Metadata == nil {
		c.add("metadata is required ({} when there is none)")
	}
	c.text("created_at", d.CreatedAt)
}

func (d HoldCapturedData) validate(c *checker) {
	c.hold(HoldData(d), "captured")
	if len(d.Captures) == 0 {
		c.add("captures: a captured hold paid at least one account")
	}
}

func (d HoldVoidedData) validate(c *checker) { c.hold(HoldData(d), "voided") }

func (d HoldExpiredData) validate(c *checker) { c.hold(HoldData(d), "expired") }

func (c *checker) hold(d HoldData, status string) {
	if u, err := uuid.Parse(d.HoldID); err != nil || u.String() != d.HoldID {
		c.add("hold_id %q is not a lowercase uuid", d.HoldID)
	}
	c.oneOf("status", d.Status, holdStatuses)
	if d.Status != status {
		c.add("status %q: this event is about a hold that is %s", d.Status, status)
	}
	c.account("from", d.From)
	c.oneOf("asset", d.Asset, assets)
	c.decimal("amount", d.Amount)
	c.decimal("captured_amount", d.CapturedAmount)
	c.decimal("released_amount", d.ReleasedAmount)
	if d.Captures == nil {
		c.add("captures must be a list (empty when nothing was captured)")
	}
	for i, x := range d.Captures {
		c.account(fmt.Sprintf("captures[%d].to", i), x.To)
		c.decimal(fmt.Sprintf("captures[%d].amount", i), x.Amount)
	}
	c.text("expires_at", d.ExpiresAt)
	c.text("created_at", d.CreatedAt)
	c.text("updated_at", d.UpdatedAt)
	if d.Metadata == nil {
		c.add("metadata must be an object (empty when none was given)")
	}
}

func (c *checker) account(name string, r AccountRefData) {
	if (r.ExternalUserID == "") == (r.PlatformAccount == "") {
		c.add("%s must name exactly one of external_user_id and platform_account", name)
	}
}

// checkData makes sure data is the struct of typ and carries every
// required value, so that a bug fails the emitting transaction instead of
// sending the platform an event it cannot use.
func checkData(typ Type, data any) (Data, error) {
	if data == nil {
		return nil, fmt.Errorf("%w: %s: no data", ErrData, typ)
	}
	if v := reflect.ValueOf(data); v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil, fmt.Errorf("%w: %s: nil data", ErrData, typ)
		}
		data = v.Elem().Interface()
	}
	d, ok := data.(Data)
	if !ok || DataFor(typ) == nil {
		return nil, fmt.Errorf("%w: %s: unknown type or data %T", ErrData, typ, data)
	}
	if d.Type() != typ {
		return nil, fmt.Errorf("%w: %T is the data of %s, not of %s", ErrData, data, d.Type(), typ)
	}
	var c checker
	d.validate(&c)
	if len(c.problems) > 0 {
		return nil, fmt.Errorf("%w: %s: %s", ErrData, typ, strings.Join(c.problems, "; "))
	}
	return d, nil
}

var decimalPattern = regexp.MustCompile(`^(0|[1-9][0-9]*)(\.[0-9]+)?$`)

type checker struct{ problems []string }

func (c *checker) add(format string, a ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, a...))
}

func (c *checker) text(name, v string) {
	if strings.TrimSpace(v) == "" {
		c.add("%s is required", name)
	}
}

func (c *checker) optText(name string, v *string) {
	if v != nil {
		c.text(name, *v)
	}
}

func (c *checker) decimal(name, v string) {
	if !decimalPattern.MatchString(v) {
		c.add("%s %q is not a non-negative decimal string", name, v)
	}
}

func (c *checker) optDecimal(name string, v *string) {
	if v != nil {
		c.decimal(name, *v)
	}
}

func (c *checker) oneOf(name, v string, allowed []string) {
	if !slices.Contains(allowed, v) {
		c.add("%s %q is not one of %s", name, v, strings.Join(allowed, ", "))
	}
}

// owner checks that exactly one of a user and a platform account owns the
// resource.
func (c *checker) owner(externalUserID, platformAccount *string, assetCode string) {
	switch {
	case (externalUserID == nil) == (platformAccount == nil):
		c.add("exactly one of external_user_id and platform_account must be set")
	case externalUserID != nil:
		if n := len([]rune(*externalUserID)); n < 1 || n > 255 {
			c.add("external_user_id must have 1 to 255 characters")
		}
	case !platformName.MatchString(*platformAccount):
		c.add("platform_account %q is not a platform account name", *platformAccount)
	}
	c.oneOf("asset", assetCode, assets)
}

var platformName = regexp.MustCompile(`^[a-z0-9_.:-]{1,64}$`)

func (c *checker) deposit(id string, user, platform *string, assetCode, status string) {
	if u, err := uuid.Parse(id); err != nil || u.String() != id {
		c.add("deposit_id %q is not a lowercase uuid", id)
	}
	c.owner(user, platform, assetCode)
	c.oneOf("status", status, depositStatuses)
}

func (c *checker) withdrawal(id string, user, platform *string, assetCode, status, gross string) {
	if n := len(id); n < 1 || n > 255 {
		c.add("withdrawal_id must have 1 to 255 characters")
	}
	c.owner(user, platform, assetCode)
	c.oneOf("status", status, withdrawalStatuses)
	c.decimal("amount_gross", gross)
}
