package chain

// Code classifies why a destination was refused.
type Code string

// The refusal codes.
const (
	CodeMalformed        Code = "malformed"          // empty, spaces, or does not decode
	CodeUnknownFormat    Code = "unknown_format"     // not an address or invoice of a known kind
	CodeWrongKind        Code = "wrong_kind"         // a valid value of another kind (a TRON address given for BTC, ...)
	CodeEthereumAddress  Code = "ethereum_address"   // a 0x address where a TRON address is needed
	CodeWrongNetwork     Code = "wrong_network"      // valid, but for another network than the deployment's
	CodeBadChecksum      Code = "bad_checksum"       // mistyped: the checksum does not match
	CodeInvalidCharacter Code = "invalid_character"  // a character the encoding does not use
	CodeMixedCase        Code = "mixed_case"         // bech32 mixing upper and lower case
	CodeUnsupported      Code = "unsupported"        // valid, but not a kind the service sends to
	CodeSubSatoshi       Code = "sub_satoshi_amount" // invoice amount is not whole satoshis
	CodeInvoiceExpired   Code = "invoice_expired"    // invoice already expired
	CodeInvoiceExpiring  Code = "invoice_expiring"   // invoice has too little life left
	CodeAmountMismatch   Code = "amount_mismatch"    // invoice amount differs from the amount to pay
)

// Error is a refused destination. Error() is the integrator-facing message;
// the library error that caused it, if any, is kept for logs via Unwrap.
type Error struct {
	Code Code
	Msg  string
	Err  error
}

func (e *Error) Error() string { return e.Msg }

func (e *Error) Unwrap() error { return e.Err }

// Is matches any *Error with the same Code, so errors.Is(err,
// chain.ErrWrongNetwork) works whatever the message.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Sentinels for errors.Is, one per Code.
var (
	ErrMalformed        = &Error{Code: CodeMalformed, Msg: "malformed"}
	ErrUnknownFormat    = &Error{Code: CodeUnknownFormat, Msg: "unknown address format"}
	ErrWrongKind        = &Error{Code: CodeWrongKind, Msg: "wrong kind of destination"}
	ErrEthereumAddress  = &Error{Code: CodeEthereumAddress, Msg: "Ethereum-style address"}
	ErrWrongNetwork     = &Error{Code: CodeWrongNetwork, Msg: "wrong network"}
	ErrBadChecksum      = &Error{Code: CodeBadChecksum, Msg: "bad checksum"}
	ErrInvalidCharacter = &Error{Code: CodeInvalidCharacter, Msg: "invalid character"}
	ErrMixedCase        = &Error{Code: CodeMixedCase, Msg: "mixed case"}
	ErrUnsupported      = &Error{Code: CodeUnsupported, Msg: "unsupported destination"}
	ErrSubSatoshi       = &Error{Code: CodeSubSatoshi, Msg: "sub-satoshi amount"}
	ErrInvoiceExpired   = &Error{Code: CodeInvoiceExpired, Msg: "invoice expired"}
	ErrInvoiceExpiring  = &Error{Code: CodeInvoiceExpiring, Msg: "invoice expires too soon"}
	ErrAmountMismatch   = &Error{Code: CodeAmountMismatch, Msg: "invoice amount mismatch"}
)

func refuse(code Code, msg string, cause error) *Error {
	return &Error{Code: code, Msg: msg, Err: cause}
}
