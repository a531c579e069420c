package operatortest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math/big"

	"github.com/go-webauthn/webauthn/protocol/webauthncbor"
	"github.com/go-webauthn/webauthn/protocol/webauthncose"

	"svc/modules/operator"
)

// The authenticator data flags a Passkey may set.
const (
	FlagUP byte = 0x01 // user present
	FlagUV byte = 0x04 // user verified
)

// Passkey is a software WebAuthn authenticator with one credential (ES256
// on P-256 as most passkeys are, or EdDSA or RS256): it signs statements
// as a browser and a passkey would for the console, without either. Its
// fields shape the assertions it makes, so a test can make one that a
// check refuses.
type Passkey struct {
	// RPID is the relying party ID whose SHA-256 the authenticator data
	// starts with.
	RPID string
	// Flags are the authenticator data's flags: UP|UV by default.
	Flags byte
	// Type is the client data's type: "webauthn.get" by default.
	Type string
	// Count is the signature counter, incremented before each signature.
	Count uint32

	signer crypto.Signer
	hash   crypto.Hash // SHA256: the signer signs the message's digest; 0: the message itself (Ed25519)
	cose   []byte
}

// NewPasskey is a fresh ES256 (P-256) passkey for the relying party rpID.
func NewPasskey(rpID string) *Passkey {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	pub, err := priv.PublicKey.ECDH()
	must(err)
	pt := pub.Bytes() // 0x04 || x || y
	return newPasskey(rpID, priv, crypto.SHA256, webauthncose.EC2PublicKeyData{
		PublicKeyData: webauthncose.PublicKeyData{KeyType: int64(webauthncose.EllipticKey), Algorithm: int64(webauthncose.AlgES256)},
		Curve:         int64(webauthncose.P256),
		XCoord:        pt[1:33],
		YCoord:        pt[33:],
	})
}

// NewPasskeyEd25519 is a fresh EdDSA (Ed25519) passkey for rpID.
func NewPasskeyEd25519(rpID string) *Passkey {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	must(err)
	return newPasskey(rpID, priv, 0, webauthncose.OKPPublicKeyData{
		PublicKeyData: webauthncose.PublicKeyData{KeyType: int64(webauthncose.OctetKey), Algorithm: int64(webauthncose.AlgEdDSA)},
		Curve:         int64(webauthncose.Ed25519),
		XCoord:        pub,
	})
}

// NewPasskeyRSA is a fresh RS256 (RSA 2048, PKCS #1 v1.5) passkey for
// rpID, as Windows Hello makes them.
func NewPasskeyRSA(rpID string) *Passkey {
	priv, err := rsa.GenerateKey(rand.Reader, 2048)
	must(err)
	return newPasskey(rpID, priv, crypto.SHA256, webauthncose.RSAPublicKeyData{
		PublicKeyData: webauthncose.PublicKeyData{KeyType: int64(webauthncose.RSAKey), Algorithm: int64(webauthncose.AlgRS256)},
		Modulus:       priv.N.Bytes(),
		Exponent:      big.NewInt(int64(priv.E)).Bytes(),
	})
}

func newPasskey(rpID string, s crypto.Signer, h crypto.Hash, key any) *Passkey {
	cose, err := webauthncbor.Marshal(key)
	must(err)
	return &Passkey{RPID: rpID, Flags: FlagUP | FlagUV, Type: "webauthn.get", signer: s, hash: h, cose: cose}
}

func must(err error) {
	if err != nil {
		panic(err) // key generation and signing with crypto/rand do not fail
	}
}

// Public is the passkey's public key as enrolled: "webauthn:" and its
// COSE_Key, CTAP2 canonical CBOR as an authenticator gives it.
func (p *Passkey) Public() operator.PublicKey {
	return operator.PublicKey{Kind: operator.KindWebAuthn, Key: p.cose}
}

// Sign signs st as the console would have the browser do it at origin: it
// sets st's key id, and its nonce when empty (st must have a time), and
// makes an assertion whose challenge is the statement's.
func (p *Passkey) Sign(st operator.Statement, origin string) operator.Envelope {
	st.V = 1
	st.KeyID = p.Public().ID()
	if st.At == "" {
		panic("operatortest: the statement has no time")
	}
	if st.Nonce == "" {
		st.Nonce = operator.NewNonce()
	}
	b, err := st.Encode()
	must(err)
	cd, err := json.Marshal(map[string]any{
		"type":        p.Type,
		"challenge":   base64.RawURLEncoding.EncodeToString(operator.Challenge(b)),
		"origin":      origin,
		"crossOrigin": false,
	})
	must(err)
	p.Count++
	rpHash := sha256.Sum256([]byte(p.RPID))
	ad := append(rpHash[:], p.Flags)
	ad = binary.BigEndian.AppendUint32(ad, p.Count)
	return operator.Envelope{Statement: b, Signature: p.Assert(ad, cd), AuthenticatorData: ad, ClientDataJSON: cd}
}

// Assert is the authenticator's signature over authData followed by the
// SHA-256 of clientDataJSON, as WebAuthn has it (ECDSA: ASN.1 DER).
func (p *Passkey) Assert(authData, clientDataJSON []byte) []byte {
	h := sha256.Sum256(clientDataJSON)
	msg := append(append([]byte{}, authData...), h[:]...)
	if p.hash != 0 {
		d := sha256.Sum256(msg)
		msg = d[:]
	}
	sig, err := p.signer.Sign(rand.Reader, msg, p.hash)
	must(err)
	return sig
}

// PKCS8 is the passkey's private key in PKCS #8 DER, as a browser's
// virtual authenticator takes it (platform/browsertest).
func (p *Passkey) PKCS8() []byte {
	b, err := x509.MarshalPKCS8PrivateKey(p.signer)
	must(err)
	return b
}

// FlagAT is the authenticator data's flag of attested credential data.
const FlagAT byte = 0x40

// Create is the answer of navigator.credentials.create as the browser
// gives it when this passkey is made for challenge at origin: the
// attestation object (format "none", the authenticator data with the
// passkey's flags, AT set, and its COSE key) and the client data JSON.
func (p *Passkey) Create(challenge []byte, origin string) (attestationObject, clientDataJSON []byte) {
	cd, err := json.Marshal(map[string]any{
		"type":        "webauthn.create",
		"challenge":   base64.RawURLEncoding.EncodeToString(challenge),
		"origin":      origin,
		"crossOrigin": false,
	})
	must(err)
	rpHash := sha256.Sum256([]byte(p.RPID))
	ad := append(rpHash[:], p.Flags|FlagAT)
	ad = binary.BigEndian.AppendUint32(ad, p.Count)
	ad = append(ad, make([]byte, 16)...) // AAGUID: none
	credID := sha256.Sum256(p.cose)
	ad = binary.BigEndian.AppendUint16(ad, uint16(len(credID)))
	ad = append(append(ad, credID[:]...), p.cose...)
	att, err := webauthncbor.Marshal(map[string]any{"fmt": "none", "attStmt": map[string]any{}, "authData": ad})
	must(err)
	return att, cd
}
