package operator_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"testing"
	"time"

	"github.com/go-webauthn/webauthn/protocol/webauthncbor"
	"github.com/go-webauthn/webauthn/protocol/webauthncose"
	"github.com/stretchr/testify/require"

	"svc/modules/operator"
	"svc/modules/operator/operatortest"
	"svc/platform/dbtest"
	"svc/platform/fault"
)

// The console's relying party in these tests.
var testRP = operator.RelyingParty{ID: "console.example.com", Origins: []string{"https://console.example.com"}}

const testOrigin = "https://console.example.com"

// TestPasskeySignature: a passkey enrolled for an operator through the
// chain signs a statement the way the console has a browser do it, and
// the service verifies it as that operator's; every check of the
// assertion refuses a passkey signature that fails it with a 401 naming
// the check; the operator's Ed25519 key still signs the Ed25519 way.
func TestPasskeySignature(t *testing.T) {
	d := dbtest.New(t)
	ctx := context.Background()
	now := time.Now
	team := operatortest.Team(t, d.Bun, now,
		operatortest.Member{Name: "alice", Role: operator.Admin},
		operatortest.Member{Name: "bob", Role: operator.Approver})
	svc := &operator.Service{DB: d.Bun, RP: testRP, Now: now}

	// alice adds bob's passkeys: ES256, and EdDSA and RS256.
	pk := operatortest.NewPasskey(testRP.ID)
	others := []*operatortest.Passkey{operatortest.NewPasskeyEd25519(testRP.ID), operatortest.NewPasskeyRSA(testRP.ID)}
	for _, p := range append([]*operatortest.Passkey{pk}, others...) {
		head, err := svc.Head(ctx, d.Bun)
		require.NoError(t, err)
		c := operator.Change{Action: operator.ActionAddKey, Name: "bob", PublicKey: p.Public().String()}
		res, err := svc.Submit(ctx, operatortest.Sign(t, team["alice"], c.Statement(head, now())))
		require.NoError(t, err)
		require.Equal(t, "applied", res.Status)
	}
	r, err := svc.Roster(ctx, d.Bun)
	require.NoError(t, err)
	require.Equal(t, "bob", r.Keys[pk.Public().ID()].Operator)

	x := operator.Expect{Action: "withdrawal.approve", Resource: "w1", Facts: map[string]string{"amount": "1.50000000", "asset": "BTC"}, Role: operator.Approver}
	st := func() operator.Statement { return operator.NewStatement(x.Action, x.Resource, x.Facts, now()) }

	// A valid passkey signature, as the header carries it, verifies as bob's.
	env, err := operator.ParseHeader(pk.Sign(st(), testOrigin).Header())
	require.NoError(t, err)
	sig, err := svc.Verify(ctx, d.Bun, env, x)
	require.NoError(t, err)
	require.Equal(t, "bob", sig.Operator)
	require.Equal(t, pk.Public().ID(), sig.KeyID)
	for _, p := range others {
		sig, err := svc.Verify(ctx, d.Bun, p.Sign(st(), testOrigin), x)
		require.NoError(t, err)
		require.Equal(t, p.Public().ID(), sig.KeyID)
	}
	// bob's Ed25519 key still signs the Ed25519 way.
	sig, err = svc.Verify(ctx, d.Bun, operatortest.Sign(t, team["bob"], st()), x)
	require.NoError(t, err)
	require.Equal(t, team["bob"].Public().ID(), sig.KeyID)
	// A valid passkey signature over other facts is a 403, as any other.
	y := x
	y.Facts = map[string]string{"amount": "2.00000000", "asset": "BTC"}
	_, err = svc.Verify(ctx, d.Bun, pk.Sign(st(), testOrigin), y)
	require.Equal(t, fault.Forbidden, fault.KindOf(err), "%v", err)

	variant := func(f func(p *operatortest.Passkey)) *operatortest.Passkey {
		q := *pk
		f(&q)
		return &q
	}
	for _, tc := range []struct {
		name string
		env  func() operator.Envelope
		svc  *operator.Service
		want string
	}{
		{"another statement", func() operator.Envelope {
			e := pk.Sign(st(), testOrigin)
			e.Statement = pk.Sign(st(), testOrigin).Statement // another nonce
			return e
		}, nil, "challenge is not the statement's"},
		{"wrong origin", func() operator.Envelope { return pk.Sign(st(), "https://console.example.org") }, nil, `origin "https://console.example.org" is not one of`},
		{"registration, not assertion", func() operator.Envelope {
			return variant(func(p *operatortest.Passkey) { p.Type = "webauthn.create" }).Sign(st(), testOrigin)
		}, nil, `client data type is "webauthn.create"`},
		{"client data not JSON", func() operator.Envelope {
			e := pk.Sign(st(), testOrigin)
			e.ClientDataJSON = []byte("{")
			return e
		}, nil, "client data JSON does not parse"},
		{"wrong rp id", func() operator.Envelope {
			return variant(func(p *operatortest.Passkey) { p.RPID = "example.com" }).Sign(st(), testOrigin)
		}, nil, "for another relying party"},
		{"user not present", func() operator.Envelope {
			return variant(func(p *operatortest.Passkey) { p.Flags = operatortest.FlagUV }).Sign(st(), testOrigin)
		}, nil, "lacks the user-present flag"},
		{"user not verified", func() operator.Envelope {
			return variant(func(p *operatortest.Passkey) { p.Flags = operatortest.FlagUP }).Sign(st(), testOrigin)
		}, nil, "lacks the user-verified flag"},
		{"authenticator data too short", func() operator.Envelope {
			e := pk.Sign(st(), testOrigin)
			e.AuthenticatorData = e.AuthenticatorData[:36]
			return e
		}, nil, "authenticator data does not parse"},
		{"tampered authenticator data", func() operator.Envelope {
			e := pk.Sign(st(), testOrigin)
			e.AuthenticatorData[36] ^= 1 // the counter
			return e
		}, nil, "signature does not verify"},
		{"tampered client data", func() operator.Envelope {
			e := pk.Sign(st(), testOrigin)
			e.ClientDataJSON = bytes.Replace(e.ClientDataJSON, []byte("{"), []byte("{ "), 1)
			return e
		}, nil, "signature does not verify"},
		{"bad signature", func() operator.Envelope {
			e := pk.Sign(st(), testOrigin)
			e.Signature[len(e.Signature)-1] ^= 1
			return e
		}, nil, "signature does not verify"},
		{"signed by another passkey", func() operator.Envelope {
			e := pk.Sign(st(), testOrigin)
			e.Signature = operatortest.NewPasskey(testRP.ID).Assert(e.AuthenticatorData, e.ClientDataJSON)
			return e
		}, nil, "signature does not verify with key " + pk.Public().ID()},
		{"no authenticator data", func() operator.Envelope {
			e := pk.Sign(st(), testOrigin)
			e.AuthenticatorData, e.ClientDataJSON = nil, nil
			return e
		}, nil, "carries its authenticator_data and client_data_json"},
		{"no relying party", func() operator.Envelope { return pk.Sign(st(), testOrigin) },
			&operator.Service{DB: d.Bun, Now: now}, "no WebAuthn relying party"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := svc
			if tc.svc != nil {
				s = tc.svc
			}
			_, err := s.Verify(ctx, d.Bun, tc.env(), x)
			require.Equal(t, fault.Unauthenticated, fault.KindOf(err), "%v", err)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestPasskeySignsChange: an admin's passkey signs an enrollment change,
// and the chain replays with it.
func TestPasskeySignsChange(t *testing.T) {
	d := dbtest.New(t)
	ctx := context.Background()
	now := time.Now
	team := operatortest.Team(t, d.Bun, now, operatortest.Member{Name: "alice", Role: operator.Admin})
	svc := &operator.Service{DB: d.Bun, RP: testRP, Now: now}
	pk := operatortest.NewPasskey(testRP.ID)
	head, err := svc.Head(ctx, d.Bun)
	require.NoError(t, err)
	c := operator.Change{Action: operator.ActionAddKey, Name: "alice", PublicKey: pk.Public().String()}
	_, err = svc.Submit(ctx, operatortest.Sign(t, team["alice"], c.Statement(head, now())))
	require.NoError(t, err)

	head, err = svc.Head(ctx, d.Bun)
	require.NoError(t, err)
	carol := operatortest.NewSigner(t)
	c = operator.Change{Action: operator.ActionEnroll, Name: "carol", Role: operator.Viewer, PublicKey: carol.Public().String()}
	res, err := svc.Submit(ctx, pk.Sign(c.Statement(head, now()), testOrigin))
	require.NoError(t, err)
	require.Equal(t, "applied", res.Status)
	require.Equal(t, []string{"alice"}, res.SignedBy)
	r, err := svc.Roster(ctx, d.Bun)
	require.NoError(t, err)
	require.Equal(t, []string{"alice", "carol"}, r.Names())

	// The console moves to another address: the chain, whose record 3 a
	// passkey signed at the old one, still replays (its origin and RP ID
	// were checked when it was accepted), while a new passkey signature
	// from the old origin is refused.
	moved := &operator.Service{DB: d.Bun, RP: operator.RelyingParty{ID: "console.example", Origins: []string{"https://console.example"}}, Now: now}
	r, err = moved.Roster(ctx, d.Bun)
	require.NoError(t, err)
	require.Equal(t, []string{"alice", "carol"}, r.Names())
	x := operator.Expect{Action: "event.redeliver", Resource: "evt_1", Facts: map[string]string{}, Role: operator.Approver}
	_, err = moved.Verify(ctx, d.Bun, pk.Sign(operator.NewStatement(x.Action, x.Resource, x.Facts, now()), testOrigin), x)
	require.ErrorContains(t, err, "origin")
}

// TestOneKeyOneOperator: an Ed25519 key enrolled as a passkey (an OKP COSE
// key) has the id of the same key enrolled as "ed25519:", so one private
// key cannot belong to two operators under its two forms.
func TestOneKeyOneOperator(t *testing.T) {
	d := dbtest.New(t)
	ctx := context.Background()
	now := time.Now
	team := operatortest.Team(t, d.Bun, now, operatortest.Member{Name: "alice", Role: operator.Admin})
	svc := &operator.Service{DB: d.Bun, RP: testRP, Now: now}
	pk := operatortest.NewPasskeyEd25519(testRP.ID)
	k, err := webauthncose.ParsePublicKey(pk.Public().Key)
	require.NoError(t, err)
	raw := operator.PublicKey{Kind: operator.KindEd25519, Key: k.(webauthncose.OKPPublicKeyData).XCoord}
	require.Equal(t, raw.ID(), pk.Public().ID(), "one key, one id")

	head, err := svc.Head(ctx, d.Bun)
	require.NoError(t, err)
	c := operator.Change{Action: operator.ActionEnroll, Name: "bob", Role: operator.Approver, PublicKey: raw.String()}
	_, err = svc.Submit(ctx, operatortest.Sign(t, team["alice"], c.Statement(head, now())))
	require.NoError(t, err)
	head, err = svc.Head(ctx, d.Bun)
	require.NoError(t, err)
	c = operator.Change{Action: operator.ActionEnroll, Name: "bob2", Role: operator.Approver, PublicKey: pk.Public().String()}
	_, err = svc.Submit(ctx, operatortest.Sign(t, team["alice"], c.Statement(head, now())))
	require.ErrorContains(t, err, "already enrolled for bob")
}

// TestParseCOSE: a passkey's public key is a COSE_Key EC2 (ES256, ES384,
// ES512), OKP (EdDSA) or RSA (RS256) key in its canonical form; other
// algorithms, malformed keys and other encodings of a key are refused.
func TestParseCOSE(t *testing.T) {
	text := func(cose []byte) string {
		return operator.KindWebAuthn + ":" + base64.RawURLEncoding.EncodeToString(cose)
	}
	cbor := func(v any) []byte {
		b, err := webauthncbor.Marshal(v)
		require.NoError(t, err)
		return b
	}
	for _, p := range []*operatortest.Passkey{operatortest.NewPasskey("x"), operatortest.NewPasskeyEd25519("x"), operatortest.NewPasskeyRSA("x")} {
		pub, err := operator.ParsePublicKey(p.Public().String())
		require.NoError(t, err)
		require.Equal(t, p.Public().ID(), pub.ID())
	}
	ec2 := func(alg webauthncose.COSEAlgorithmIdentifier, crv webauthncose.COSEEllipticCurve, c elliptic.Curve) webauthncose.EC2PublicKeyData {
		k, err := ecdsa.GenerateKey(c, rand.Reader)
		require.NoError(t, err)
		pub, err := k.PublicKey.ECDH()
		require.NoError(t, err)
		pt := pub.Bytes()
		n := (len(pt) - 1) / 2
		return webauthncose.EC2PublicKeyData{
			PublicKeyData: webauthncose.PublicKeyData{KeyType: int64(webauthncose.EllipticKey), Algorithm: int64(alg)},
			Curve:         int64(crv), XCoord: pt[1 : 1+n], YCoord: pt[1+n:],
		}
	}
	for _, k := range []webauthncose.EC2PublicKeyData{
		ec2(webauthncose.AlgES384, webauthncose.P384, elliptic.P384()),
		ec2(webauthncose.AlgES512, webauthncose.P521, elliptic.P521()),
	} {
		_, err := operator.ParsePublicKey(text(cbor(k)))
		require.NoError(t, err)
	}

	p256 := ec2(webauthncose.AlgES256, webauthncose.P256, elliptic.P256())
	esp256 := p256
	esp256.Algorithm = int64(webauthncose.AlgESP256)
	offCurve := p256
	offCurve.YCoord = bytes.Clone(p256.YCoord)
	offCurve.YCoord[31] ^= 1
	noCurve := p256
	noCurve.Curve = 0
	var extra map[any]any
	require.NoError(t, webauthncbor.Unmarshal(cbor(p256), &extra))
	extra[-4] = []byte{1}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	rs1 := webauthncose.RSAPublicKeyData{
		PublicKeyData: webauthncose.PublicKeyData{KeyType: int64(webauthncose.RSAKey), Algorithm: int64(webauthncose.AlgRS1)},
		Modulus:       rsaKey.N.Bytes(), Exponent: []byte{1, 0, 1},
	}
	rsaZero := webauthncose.RSAPublicKeyData{
		PublicKeyData: webauthncose.PublicKeyData{KeyType: int64(webauthncose.RSAKey), Algorithm: int64(webauthncose.AlgRS256)},
		Modulus:       append([]byte{0}, rsaKey.N.Bytes()...), Exponent: []byte{1, 0, 1},
	}
	// The canonical key with alg (3) before kty (1).
	canon := cbor(p256)
	reordered := append([]byte{canon[0], canon[3], canon[4], canon[1], canon[2]}, canon[5:]...)
	for name, tc := range map[string]struct {
		cose []byte
		want string
	}{
		"not CBOR":                        {[]byte("not a key"), "not a COSE key"},
		"off the curve":                   {cbor(offCurve), "not on curve"},
		"ES256 without curve":             {cbor(noCurve), "not a COSE key"},
		"ESP256":                          {cbor(esp256), "ESP256 is not accepted"},
		"RSA with SHA-1":                  {cbor(rs1), "is not accepted"},
		"RSA modulus with a leading zero": {cbor(rsaZero), "leading zero byte"},
		"an extra parameter":              {cbor(extra), "not in its canonical form"},
		"not canonical order":             {reordered, "not in its canonical form"},
		"trailing bytes":                  {append(cbor(p256), 0), "not a COSE key"},
		"no key type":                     {cbor(map[int]any{3: -7}), "not a COSE key"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := operator.ParsePublicKey(text(tc.cose))
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestPasskeyOf: the public key of a passkey just made is read from the
// browser's answer, for each accepted algorithm, and every check refuses
// an answer that fails it.
func TestPasskeyOf(t *testing.T) {
	challenge := []byte("0123456789abcdef0123456789abcdef")
	for _, pk := range []*operatortest.Passkey{operatortest.NewPasskey(testRP.ID), operatortest.NewPasskeyEd25519(testRP.ID), operatortest.NewPasskeyRSA(testRP.ID)} {
		att, cd := pk.Create(challenge, testOrigin)
		got, err := operator.PasskeyOf(att, cd, challenge, testRP)
		require.NoError(t, err)
		require.Equal(t, pk.Public().String(), got.String())
	}

	pk := operatortest.NewPasskey(testRP.ID)
	att, cd := pk.Create(challenge, testOrigin)
	refused := func(name, want string, att, cd []byte, rp operator.RelyingParty) {
		t.Helper()
		_, err := operator.PasskeyOf(att, cd, challenge, rp)
		require.ErrorContains(t, err, want, name)
	}
	_, cdOther := pk.Create([]byte("another challenge"), testOrigin)
	refused("another challenge", "another challenge", att, cdOther, testRP)
	_, cdElsewhere := pk.Create(challenge, "https://elsewhere.example")
	refused("another origin", "is not one of the console's", att, cdElsewhere, testRP)
	refused("a get, not a create", "not \"webauthn.create\"", att, bytes.Replace(cd, []byte("webauthn.create"), []byte("webauthn.get"), 1), testRP)
	refused("another relying party", "another relying party", att, cd, operator.RelyingParty{ID: "other.example", Origins: testRP.Origins})
	noUV := operatortest.NewPasskey(testRP.ID)
	noUV.Flags = operatortest.FlagUP
	attNoUV, cdNoUV := noUV.Create(challenge, testOrigin)
	refused("no user verification", "without user presence and verification", attNoUV, cdNoUV, testRP)
	refused("not an attestation object", "does not parse", []byte("junk"), cd, testRP)
	refused("no relying party", "no WebAuthn relying party", att, cd, operator.RelyingParty{})
}
