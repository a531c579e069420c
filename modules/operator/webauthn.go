package operator

import "errors"

// parseCOSE reads a passkey's COSE_Key.
func parseCOSE(raw []byte) (any, error) {
	return nil, errors.New("passkeys are not supported yet")
}

// verifyWebAuthn checks a passkey's assertion over the envelope's
// statement.
func verifyWebAuthn(cose []byte, e Envelope, rp RelyingParty) error {
	return unauthenticated("passkey signatures are not supported yet")
}
