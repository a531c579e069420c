package operator

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"

	"github.com/uptrace/bun"

	"svc/platform/timefmt"
)

// Listing is the roster as GET /v1/admin/operators and svc admin operators
// list show it: the operators the enrollment chain proves, its head (what
// a change's statement signs as chain_head; null when the chain does not
// verify), how many admins must sign a change now, every discrepancy
// between the operators tables and the chain (or why the chain does not
// verify), and the changes waiting for another admin's signature.
type Listing struct {
	Operators     []View     `json:"operators"`
	ChainHead     *string    `json:"chain_head"`
	Quorum        int        `json:"quorum"`
	Discrepancies []string   `json:"discrepancies"`
	Pending       []Proposal `json:"pending"`
}

// Proposal is a change waiting for more admins' signatures: the admins
// who signed it, and how many more it needs.
type Proposal struct {
	ID              int64    `json:"id"`
	Change          Change   `json:"change"`
	ChainHead       string   `json:"chain_head"`
	SignedBy        []string `json:"signed_by"`
	ApprovalsNeeded int      `json:"approvals_needed"`
	CreatedAt       string   `json:"created_at"`
}

// List reads the roster with idb: the chain replayed, the tables compared
// with it, and the proposals on the chain's head (a proposal on an older
// head can never complete). A chain that does not verify is no error
// here: the listing is then empty and says why.
func (s *Service) List(ctx context.Context, idb bun.IDB) (Listing, error) {
	out := Listing{Operators: []View{}, Discrepancies: []string{}, Pending: []Proposal{}}
	r, err := s.Roster(ctx, idb)
	if errors.Is(err, ErrChain) {
		out.Discrepancies = append(out.Discrepancies, err.Error()+": no signed action is accepted until it verifies (svc admin audit verify)")
		return out, nil
	}
	if err != nil {
		return Listing{}, err
	}
	head := hex.EncodeToString(r.Head)
	out.Operators, out.ChainHead, out.Quorum = r.Views(), &head, r.Quorum()
	disc, err := Discrepancies(ctx, idb, r)
	if err != nil {
		return Listing{}, err
	}
	out.Discrepancies = append(out.Discrepancies, disc...)
	var props []proposalRow
	if err := idb.NewSelect().Model(&props).Where("chain_head = ?", r.Head).OrderExpr("id").Scan(ctx); err != nil {
		return Listing{}, fmt.Errorf("operators: read the proposals: %w", err)
	}
	for _, p := range props {
		v := Proposal{ID: p.ID, Change: p.Change, ChainHead: head, SignedBy: []string{}, CreatedAt: timefmt.Format(p.CreatedAt)}
		for _, e := range p.Signatures {
			st, err := e.Parse()
			if err != nil {
				continue // Submit parsed it before storing it
			}
			if k, ok := r.Keys[st.KeyID]; ok && !slices.Contains(v.SignedBy, k.Operator) {
				v.SignedBy = append(v.SignedBy, k.Operator)
			}
		}
		slices.Sort(v.SignedBy)
		v.ApprovalsNeeded = max(0, r.Quorum()-len(v.SignedBy))
		out.Pending = append(out.Pending, v)
	}
	return out, nil
}

// Problems names what is wrong with the operators, read with idb: the
// enrollment chain that does not verify, or each row of the operators
// tables that the chain does not prove (Discrepancies). None is nil. The
// reconciliation raises an alert for each.
func (s *Service) Problems(ctx context.Context, idb bun.IDB) ([]string, error) {
	r, err := s.Roster(ctx, idb)
	if errors.Is(err, ErrChain) {
		return []string{err.Error()}, nil
	}
	if err != nil {
		return nil, err
	}
	return Discrepancies(ctx, idb, r)
}
