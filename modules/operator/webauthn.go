package operator

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/protocol/webauthncbor"
	"github.com/go-webauthn/webauthn/protocol/webauthncose"
)

// A passkey signs a statement the WebAuthn way: the console asks the
// browser for an assertion (navigator.credentials.get) whose challenge is
// Challenge(statement), and sends the statement with the assertion's
// signature, authenticator data and client data JSON in the envelope. The
// passkey's public key is enrolled as "webauthn:" and its COSE_Key.
//
// The COSE key parsing and the signature verification are go-webauthn's
// (protocol/webauthncose); what is checked around them follows the
// WebAuthn assertion verification steps (§7.2), less what a stateless
// check has no use for: the credential id is not looked at (the
// statement's key id names the key), and the signature counter is not
// tracked (a replay is refused by the statement's nonce, unique in the
// audit trail, and its freshness).

// coseAlgorithms are the COSE algorithms a passkey may be enrolled with
// (the console asks for these in pubKeyCredParams), each on one curve:
// ES256 (-7, P-256), ES384 (-35, P-384), ES512 (-36, P-521), EdDSA (-8,
// Ed25519) and RS256 (-257). Other identifiers of the same keys (ESP256,
// Ed25519 -19, PS256...) would give one key a second text, hence a second
// key id, and are refused, as are SHA-1 RSA and secp256k1.
var coseAlgorithms = map[webauthncose.COSEAlgorithmIdentifier]webauthncose.COSEKeyType{
	webauthncose.AlgES256: webauthncose.EllipticKey,
	webauthncose.AlgES384: webauthncose.EllipticKey,
	webauthncose.AlgES512: webauthncose.EllipticKey,
	webauthncose.AlgEdDSA: webauthncose.OctetKey,
	webauthncose.AlgRS256: webauthncose.RSAKey,
}

// parseCOSE reads a passkey's COSE_Key: an EC2 key (ES256, ES384, ES512),
// an OKP Ed25519 key (EdDSA) or an RSA key (RS256), as go-webauthn parses
// and validates it (the point on its curve, the curve its algorithm
// names). The key must be in its canonical form, CTAP2 canonical CBOR of
// its kty, alg, crv and coordinates (or n and e) only, as authenticators
// produce it: one key then has one text and one key id, and the chain's
// refusal of a second enrollment of a key holds for passkeys too.
func parseCOSE(raw []byte) (any, error) {
	key, err := webauthncose.ParsePublicKey(raw)
	if err != nil {
		return nil, fmt.Errorf("not a COSE key of a passkey: %v", err)
	}
	var head webauthncose.PublicKeyData
	switch k := key.(type) {
	case webauthncose.EC2PublicKeyData:
		head = k.PublicKeyData
	case webauthncose.OKPPublicKeyData:
		head = k.PublicKeyData
	case webauthncose.RSAPublicKeyData:
		if k.Modulus[0] == 0 || k.Exponent[0] == 0 {
			return nil, fmt.Errorf("the COSE key is not in its canonical form (an RSA modulus or exponent with a leading zero byte)")
		}
		head = k.PublicKeyData
	default:
		return nil, fmt.Errorf("this COSE key type is not supported (EC2, OKP or RSA)")
	}
	alg := webauthncose.COSEAlgorithmIdentifier(head.Algorithm)
	if kty, ok := coseAlgorithms[alg]; !ok || kty != webauthncose.COSEKeyType(head.KeyType) {
		return nil, fmt.Errorf("COSE algorithm %s is not accepted for a passkey (ES256, ES384, ES512, EdDSA or RS256)", alg)
	}
	canon, err := webauthncbor.Marshal(key)
	if err != nil || !bytes.Equal(canon, raw) {
		return nil, fmt.Errorf("the COSE key is not in its canonical form (CTAP2 canonical CBOR of kty, alg, crv and the key's coordinates, or n and e, only)")
	}
	return key, nil
}

// verifyWebAuthn checks a passkey's assertion over the envelope's
// statement with the passkey's COSE key:
//   - the client data JSON parses, its type is "webauthn.get", its
//     challenge is the unpadded base64url of Challenge(statement), its
//     origin is one of rp's origins, and it was not made in a cross-origin
//     frame;
//   - the authenticator data parses, its RP ID hash is the SHA-256 of rp's
//     ID, and both its user-present (UP) and user-verified (UV) flags are
//     set: a signed action moves money or changes who may, so it needs the
//     person (a PIN or biometric), not only a touch of the device;
//   - the signature verifies over the authenticator data followed by the
//     SHA-256 of the client data JSON.
//
// Each failure is a 401 naming the check that failed.
func verifyWebAuthn(cose []byte, e Envelope, rp RelyingParty) error {
	if len(e.AuthenticatorData) == 0 || len(e.ClientDataJSON) == 0 {
		return unauthenticated("a passkey signature carries its authenticator_data and client_data_json")
	}
	if !rp.Recorded && (rp.ID == "" || len(rp.Origins) == 0) {
		return unauthenticated("passkey signatures are not accepted: the service has no WebAuthn relying party ID and origins")
	}
	key, err := parseCOSE(cose)
	if err != nil {
		return unauthenticated("passkey public key: " + err.Error())
	}
	id := PublicKey{Kind: KindWebAuthn, Key: cose}.ID()

	var cd protocol.CollectedClientData
	if err := json.Unmarshal(e.ClientDataJSON, &cd); err != nil {
		return unauthenticated("the passkey's client data JSON does not parse: " + err.Error())
	}
	if cd.Type != protocol.AssertCeremony {
		return unauthenticated(fmt.Sprintf("the passkey's client data type is %q, not %q", cd.Type, protocol.AssertCeremony))
	}
	if want := base64.RawURLEncoding.EncodeToString(Challenge(e.Statement)); cd.Challenge != want {
		return unauthenticated("the passkey's challenge is not the statement's: the assertion was made for another statement")
	}
	if !rp.Recorded && !protocol.IsOriginInHaystack(cd.Origin, rp.Origins) {
		return unauthenticated(fmt.Sprintf("the passkey's origin %q is not one of the console's (%v)", cd.Origin, rp.Origins))
	}
	if cd.CrossOrigin || cd.TopOrigin != "" {
		return unauthenticated("the passkey's assertion was made in a cross-origin frame")
	}

	var ad protocol.AuthenticatorData
	if err := ad.Unmarshal(e.AuthenticatorData); err != nil {
		return unauthenticated("the passkey's authenticator data does not parse: " + err.Error())
	}
	if want := sha256.Sum256([]byte(rp.ID)); !rp.Recorded && !bytes.Equal(ad.RPIDHash, want[:]) {
		return unauthenticated(fmt.Sprintf("the passkey's authenticator data is for another relying party, not %q", rp.ID))
	}
	if !ad.Flags.HasUserPresent() {
		return unauthenticated("the passkey's authenticator data lacks the user-present flag")
	}
	if !ad.Flags.HasUserVerified() {
		return unauthenticated("the passkey's authenticator data lacks the user-verified flag: a signed action needs the authenticator to verify the operator (PIN or biometric)")
	}

	cdHash := sha256.Sum256(e.ClientDataJSON)
	signed := append(bytes.Clone(e.AuthenticatorData), cdHash[:]...)
	ok, err := webauthncose.VerifySignature(key, signed, e.Signature)
	if err != nil || !ok {
		return unauthenticated("the passkey signature does not verify with key " + id)
	}
	return nil
}

// PasskeyOf reads the public key of a passkey just created (the answer to
// navigator.credentials.create), as it is then enrolled: the client data
// is a "webauthn.create" for challenge from one of rp's origins, not in a
// cross-origin frame; the attestation object's authenticator data is for
// rp's ID, with the user-present and user-verified flags and the
// credential's public key, which must be a key parseCOSE accepts (its
// algorithm and canonical form). The attestation statement is not looked
// at: what makes a passkey an operator's is the admins' signatures on its
// enrollment, not the make of the device.
func PasskeyOf(attestationObject, clientDataJSON, challenge []byte, rp RelyingParty) (PublicKey, error) {
	if rp.ID == "" || len(rp.Origins) == 0 {
		return PublicKey{}, errors.New("passkeys cannot be made: the service has no WebAuthn relying party ID and origins")
	}
	var cd protocol.CollectedClientData
	if err := json.Unmarshal(clientDataJSON, &cd); err != nil {
		return PublicKey{}, fmt.Errorf("the passkey's client data JSON does not parse: %v", err)
	}
	switch {
	case cd.Type != protocol.CreateCeremony:
		return PublicKey{}, fmt.Errorf("the passkey's client data type is %q, not %q", cd.Type, protocol.CreateCeremony)
	case cd.Challenge != base64.RawURLEncoding.EncodeToString(challenge):
		return PublicKey{}, errors.New("the passkey was made for another challenge")
	case !protocol.IsOriginInHaystack(cd.Origin, rp.Origins):
		return PublicKey{}, fmt.Errorf("the passkey's origin %q is not one of the console's (%v)", cd.Origin, rp.Origins)
	case cd.CrossOrigin || cd.TopOrigin != "":
		return PublicKey{}, errors.New("the passkey was made in a cross-origin frame")
	}
	var ao protocol.AttestationObject
	if err := webauthncbor.Unmarshal(attestationObject, &ao); err != nil {
		return PublicKey{}, fmt.Errorf("the passkey's attestation object does not parse: %v", err)
	}
	if err := ao.AuthData.Unmarshal(ao.RawAuthData); err != nil {
		return PublicKey{}, fmt.Errorf("the passkey's authenticator data does not parse: %v", err)
	}
	ad := ao.AuthData
	if want := sha256.Sum256([]byte(rp.ID)); !bytes.Equal(ad.RPIDHash, want[:]) {
		return PublicKey{}, fmt.Errorf("the passkey is for another relying party, not %q", rp.ID)
	}
	if !ad.Flags.HasUserPresent() || !ad.Flags.HasUserVerified() {
		return PublicKey{}, errors.New("the passkey was made without user presence and verification (a PIN or biometric)")
	}
	if !ad.Flags.HasAttestedCredentialData() || len(ad.AttData.CredentialPublicKey) == 0 {
		return PublicKey{}, errors.New("the passkey's authenticator data carries no public key")
	}
	if _, err := parseCOSE(ad.AttData.CredentialPublicKey); err != nil {
		return PublicKey{}, err
	}
	return PublicKey{Kind: KindWebAuthn, Key: ad.AttData.CredentialPublicKey}, nil
}
