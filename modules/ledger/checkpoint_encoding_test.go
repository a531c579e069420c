package ledger_test

import (
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/modules/ledger"
)

// TestEncodingsAreTheDocumentedBytes spells out, field by field, the
// encodings of docs/checkpoints.md for one entry and one checkpoint: a
// change to either encoding must change the document too.
func TestEncodingsAreTheDocumentedBytes(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 31, 12, 0, 0, 123456000, time.UTC) // 1769860800123456 µs
	after := int64(1000)
	e := ledger.SealedEntry{ID: 41, XactID: 1201, Kind: "deposit_credit", Asset: "BTC", SourceRef: "p:1", CreatedAt: at,
		Postings: []ledger.SealedPosting{
			{ID: 81, AccountID: 12, AccountAsset: "BTC", AccountKind: "user_available", AccountOwner: "u1", Amount: 1000, BalanceAfter: &after},
			{ID: 82, AccountID: 3, AccountAsset: "BTC", AccountKind: "custody", Amount: -1000},
		}}
	want := strings.Join([]string{
		"45", "01", // tag E, version 1
		"0000000000000029", // id 41
		"00000000000004b1", // xact 1201
		"0000000e", hex.EncodeToString([]byte("deposit_credit")),
		"00000003", hex.EncodeToString([]byte("BTC")),
		"00000003", hex.EncodeToString([]byte("p:1")),
		"00",               // memo absent
		"000649add44b1240", // created_at in µs
		"00000002",         // two postings
		"0000000000000051", "000000000000000c", "00000003", hex.EncodeToString([]byte("BTC")),
		"0000000e", hex.EncodeToString([]byte("user_available")), "00000002", hex.EncodeToString([]byte("u1")),
		"00000000000003e8", "01", "00000000000003e8",
		"0000000000000052", "0000000000000003", "00000003", hex.EncodeToString([]byte("BTC")),
		"00000007", hex.EncodeToString([]byte("custody")), "00000000",
		"fffffffffffffc18", "00",
	}, "")
	require.Equal(t, want, hex.EncodeToString(e.Encode()))
	require.Equal(t, int64(1769860800123456), at.UnixMicro())

	memo := ""
	e.Memo = &memo
	require.Contains(t, hex.EncodeToString(e.Encode()), "703a310100000000", "an empty memo is present: 01 then length 0")

	root := make([]byte, 32)
	root[31] = 1
	c := ledger.Checkpoint{Seq: 3, XidFrom: 1200, XidTo: 1450, EntryCount: 2, Root: root, PrevHash: make([]byte, 32), CreatedAt: at}
	want = "43" + "01" + "0000000000000003" + "00000000000004b0" + "00000000000005aa" + "0000000000000002" +
		hex.EncodeToString(root) + strings.Repeat("00", 32) + "000649add44b1240"
	require.Equal(t, want, hex.EncodeToString(c.Encode()))
	require.Len(t, c.Encode(), 106)
}
