package hold

import (
	"svc/modules/ledger"
	"svc/platform/fault"
)

// AccountRef is the API's name of an account (openapi.json AccountRef):
// exactly one of a user's external_user_id and a platform account's name.
type AccountRef struct {
	ExternalUserID  *string `json:"external_user_id,omitempty"`
	PlatformAccount *string `json:"platform_account,omitempty"`
}

// RefOf names a holder.
func RefOf(h ledger.Holder) AccountRef {
	id := h.ID
	if h.Platform {
		return AccountRef{PlatformAccount: &id}
	}
	return AccountRef{ExternalUserID: &id}
}

// Holder returns the account r names; a field error at loc when it names
// none, both, or a platform account by a name that cannot be one.
func (r AccountRef) Holder(loc ...any) (ledger.Holder, error) {
	switch {
	case r.ExternalUserID != nil && r.PlatformAccount == nil:
		return ledger.UserHolder(*r.ExternalUserID), nil
	case r.PlatformAccount != nil && r.ExternalUserID == nil:
		if !ledger.ValidPlatformName(*r.PlatformAccount) {
			return ledger.Holder{}, fault.Validation(fault.FieldError{Loc: append(loc, "platform_account"), Type: "string_pattern_mismatch",
				Msg: "a platform account's name has 1 to 64 characters of [a-z0-9_.:-]", Input: *r.PlatformAccount})
		}
		return ledger.PlatformHolder(*r.PlatformAccount), nil
	}
	return ledger.Holder{}, fault.Validation(fault.FieldError{Loc: loc, Type: "value_error",
		Msg: "an account is exactly one of external_user_id and platform_account"})
}

// payer is the hold's payer.
func (h Hold) payer() ledger.Holder { return ledger.Holder{Platform: h.PayerPlatform, ID: h.Payer} }

// to is the account a capture paid.
func (c CaptureRow) to() ledger.Holder { return ledger.Holder{Platform: c.ToPlatform, ID: c.ToID} }
