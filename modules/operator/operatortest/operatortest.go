// Package operatortest enrolls operators for tests and signs their
// statements.
package operatortest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"svc/modules/operator"
)

// Member is an operator to enroll.
type Member struct {
	Name string
	Role operator.Role
}

// Team enrolls members through the service's own Submit, the first as the
// first admin (operators init; it must be an admin), each later one signed
// by as many admins as the quorum then needs, and returns their signers by
// name. now is the clock the service reads.
func Team(t testing.TB, d bun.IDB, now func() time.Time, members ...Member) map[string]*operator.Signer {
	t.Helper()
	svc := &operator.Service{DB: d, Now: now}
	ctx := context.Background()
	out := map[string]*operator.Signer{}
	var admins []string
	for i, m := range members {
		s := NewSigner(t)
		c := operator.Change{Action: operator.ActionEnroll, Name: m.Name, Role: m.Role, PublicKey: s.Public().String()}
		if i == 0 {
			if m.Role != operator.Admin {
				t.Fatalf("operatortest: the first member must be an admin")
			}
			c.Action = operator.ActionInit
		}
		head, err := svc.Head(ctx, d)
		if err != nil {
			t.Fatalf("operatortest: head: %v", err)
		}
		signers := admins
		if i == 0 {
			signers = []string{""}
		}
		if len(signers) > 2 {
			signers = signers[:2]
		}
		for _, a := range signers {
			by := s
			if a != "" {
				by = out[a]
			}
			res, err := svc.Submit(ctx, Sign(t, by, c.Statement(head, now())))
			if err != nil {
				t.Fatalf("operatortest: %s %s: %v", c.Action, m.Name, err)
			}
			if res.Status == "applied" {
				break
			}
		}
		out[m.Name] = s
		if m.Role == operator.Admin {
			admins = append(admins, m.Name)
		}
	}
	return out
}

// NewSigner is a fresh Ed25519 signer.
func NewSigner(t testing.TB) *operator.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return operator.NewSigner(priv)
}

// Sign signs st with s.
func Sign(t testing.TB, s *operator.Signer, st operator.Statement) operator.Envelope {
	t.Helper()
	e, err := s.Sign(st)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// Header signs the statement of x at now and returns the
// Svc-Operator-Signature header to send with it.
func Header(t testing.TB, s *operator.Signer, x operator.Expect, now time.Time) map[string]string {
	t.Helper()
	e := Sign(t, s, operator.NewStatement(x.Action, x.Resource, x.Facts, now))
	return map[string]string{operator.Header: e.Header()}
}
