package operator

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base32"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/go-webauthn/webauthn/protocol/webauthncose"
)

// Key kinds.
const (
	KindEd25519  = "ed25519"  // a key file, for the CLI and scripts
	KindWebAuthn = "webauthn" // a passkey (COSE public key), for the console
)

// PublicKey is an operator's public key as enrolled: "ed25519:" or
// "webauthn:" followed by the key in unpadded base64url (raw 32 bytes for
// Ed25519, the COSE_Key for a passkey).
type PublicKey struct {
	Kind string
	Key  []byte
}

// String is the key's text form, as enrolled and as signed.
func (p PublicKey) String() string {
	return p.Kind + ":" + base64.RawURLEncoding.EncodeToString(p.Key)
}

// ID is the key's id: "opk_" and 16 base32 characters of the SHA-256 of
// its text form. Two enrollments of one key have one id, which the chain
// refuses to give to a second operator.
//
// A passkey's Ed25519 key (an OKP COSE key) has the id of the same key
// enrolled as "ed25519:", so that one private key cannot be enrolled for
// two operators under its two forms.
func (p PublicKey) ID() string {
	if p.Kind == KindWebAuthn {
		if k, err := parseCOSE(p.Key); err == nil {
			if okp, ok := k.(webauthncose.OKPPublicKeyData); ok && len(okp.XCoord) == ed25519.PublicKeySize {
				return PublicKey{Kind: KindEd25519, Key: okp.XCoord}.ID()
			}
		}
	}
	sum := sha256.Sum256([]byte(p.String()))
	return "opk_" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:10]))
}

// ParsePublicKey reads a key's text form.
func ParsePublicKey(s string) (PublicKey, error) {
	kind, b64, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok {
		return PublicKey{}, fmt.Errorf("public key %q: want ed25519:BASE64URL or webauthn:BASE64URL", s)
	}
	raw, err := base64.RawURLEncoding.DecodeString(b64)
	if err != nil {
		return PublicKey{}, fmt.Errorf("public key: %w", err)
	}
	switch kind {
	case KindEd25519:
		if len(raw) != ed25519.PublicKeySize {
			return PublicKey{}, fmt.Errorf("public key: an Ed25519 key has %d bytes, not %d", ed25519.PublicKeySize, len(raw))
		}
	case KindWebAuthn:
		if _, err := parseCOSE(raw); err != nil {
			return PublicKey{}, fmt.Errorf("public key: %w", err)
		}
	default:
		return PublicKey{}, fmt.Errorf("public key: unknown kind %q (ed25519 or webauthn)", kind)
	}
	return PublicKey{Kind: kind, Key: raw}, nil
}

// Signer signs statements with an operator's Ed25519 private key.
type Signer struct {
	priv ed25519.PrivateKey
}

// NewSigner wraps a private key.
func NewSigner(priv ed25519.PrivateKey) *Signer { return &Signer{priv: priv} }

// Public is the signer's public key.
func (s *Signer) Public() PublicKey {
	return PublicKey{Kind: KindEd25519, Key: s.priv.Public().(ed25519.PublicKey)}
}

// Sign signs st with the signer's key: it sets st's key id, and its time
// and nonce when they are empty, and returns the envelope that travels.
func (s *Signer) Sign(st Statement) (Envelope, error) {
	st.V = 1
	st.KeyID = s.Public().ID()
	if st.At == "" {
		return Envelope{}, errors.New("sign: the statement has no time")
	}
	if st.Nonce == "" {
		st.Nonce = NewNonce()
	}
	b, err := st.Encode()
	if err != nil {
		return Envelope{}, err
	}
	return Envelope{Statement: b, Signature: ed25519.Sign(s.priv, signedBytes(b))}, nil
}

// GenerateKeyFile writes a new Ed25519 private key to path (PKCS#8 PEM,
// readable by its owner only; an existing file is never overwritten) and
// returns its public key.
func GenerateKeyFile(path string) (PublicKey, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return PublicKey{}, err
	}
	s := NewSigner(priv)
	return s.Public(), s.WriteFile(path)
}

// WriteFile writes the signer's private key to a new file at path
// (PKCS#8 PEM, mode 0600; an existing file is never overwritten).
func (s *Signer) WriteFile(path string) error {
	der, err := x509.MarshalPKCS8PrivateKey(s.priv)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("key file: %w", err)
	}
	if err := pem.Encode(f, &pem.Block{Type: "PRIVATE KEY", Bytes: der}); err != nil {
		_ = f.Close()
		return fmt.Errorf("key file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("key file: %w", err)
	}
	return nil
}

// LoadKeyFile reads a key file written by GenerateKeyFile. Like ssh, it
// refuses a file that others than its owner may read.
func LoadKeyFile(path string) (*Signer, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("operator key: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("operator key %s: readable by others (mode %04o); chmod 600 it", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("operator key: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("operator key %s: not a PEM private key", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("operator key %s: %w", path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("operator key %s: not an Ed25519 key", path)
	}
	return NewSigner(priv), nil
}
