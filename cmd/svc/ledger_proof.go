package main

import (
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"svc/modules/liabilities"
	"svc/platform/sumtree"
)

// ledgerVerifyProofCmd is `svc ledger verify-proof FILE`: checks a proof of
// liabilities as GET /v1/users/{external_user_id}/liabilities-proof or GET
// /v1/platform-accounts/{platform_account}/liabilities-proof returns it,
// with no database (docs/provable-custody.md). The document says whose
// leaf it is (external_user_id or platform_account).
func ledgerVerifyProofCmd() *cobra.Command {
	var root, total, balance string
	c := &cobra.Command{
		Use:   "verify-proof FILE [--root HEX] [--total UNITS] [--balance UNITS]",
		Short: "Check that a user's or a platform account's balance is included in a published proof of liabilities",
		Long: `Reads a proof of liabilities (the JSON GET /v1/users/{external_user_id}/liabilities-proof
returns, or GET /v1/platform-accounts/{platform_account}/liabilities-proof for a platform account's
own leaf; - reads standard input) and checks it offline: the salted hash of the user's id (of the
byte 0xFF and the name, for a platform account), the leaf, every sibling on the path (no sum negative or above 2^63-1, no sum that overflows), and that
the path leads to the root and total in the proof. --root and --total require them to be the ones
published (GET /v1/liabilities/roots, GET /v1/admin/liabilities, the reconciliation report): only
then does "ok" say that the balance is included in the published liabilities. Without both, the
verdict says that the proof was NOT checked against a published root, since anyone can make a
tree that holds one user. A proof with an empty path (the root is the user's own leaf: a tree of
one user) is refused unless --root and --total show that the published tree is that one leaf.
--balance requires the user's (the platform account's) balance in smallest units. Exit 1 when the proof does not hold.
docs/provable-custody.md specifies the algorithm.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var (
				data []byte
				err  error
			)
			if args[0] == "-" {
				data, err = io.ReadAll(cmd.InOrStdin())
			} else {
				data, err = os.ReadFile(args[0])
			}
			if err != nil {
				return err
			}
			p, holder, err := liabilities.ParseProofDocument(data)
			if err != nil {
				return err
			}
			v, err := sumtree.Verify(p)
			if err != nil {
				if holder.Platform {
					// Its id hash is of 0xFF || name, which err quotes.
					return fmt.Errorf("%s: %w", holder, err)
				}
				return err
			}
			who := v.ExternalUserID
			if holder.Platform {
				who = "platform account " + holder.ID
			}
			if root != "" {
				want, err := sumtree.ParseHash(root, "--root")
				if err != nil {
					return err
				}
				if want != v.Root {
					return fmt.Errorf("the proof is for the root %s, not the published %s", sumtree.HexOf(v.Root), root)
				}
			}
			for _, check := range []struct {
				flag, want string
				got        uint64
			}{{"--total", total, v.Total}, {"--balance", balance, v.Balance}} {
				if check.want == "" {
					continue
				}
				n, err := sumtree.ParseAmount(check.want, check.flag)
				if err != nil {
					return err
				}
				if n != check.got {
					return fmt.Errorf("%s %s: the proof says %d", check.flag, check.want, check.got)
				}
			}
			published := root != "" && total != ""
			if v.Steps == 0 && !published {
				return fmt.Errorf("not shown to be included: the proof's path is empty, so its root %s is the user's own leaf, a tree of this user alone; "+
					"it shows inclusion only if that root and total %d are the published ones (--root, --total)", sumtree.HexOf(v.Root), v.Total)
			}
			if !published {
				fmt.Fprintf(cmd.OutOrStdout(), "NOT checked against a published root: %s of %s (smallest units) is in the tree of root %s, total %s (%s, %s, %d steps), "+
					"which the proof itself carries; pass the published root and total (GET /v1/liabilities/roots) as --root and --total to check inclusion in the liabilities\n",
					strconv.FormatUint(v.Balance, 10), who, sumtree.HexOf(v.Root), strconv.FormatUint(v.Total, 10), v.Asset, p.SnapshotAt, v.Steps)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "ok: %s of %s (smallest units) is included in the published %s liabilities of %s: root %s, total %s, %d steps\n",
				strconv.FormatUint(v.Balance, 10), who, v.Asset, p.SnapshotAt, sumtree.HexOf(v.Root), strconv.FormatUint(v.Total, 10), v.Steps)
			return nil
		},
	}
	c.Flags().StringVar(&root, "root", "", "the published root (64 lowercase hex digits) the proof must lead to")
	c.Flags().StringVar(&total, "total", "", "the published total, in smallest units")
	c.Flags().StringVar(&balance, "balance", "", "the balance the user (the platform account) expects, in smallest units")
	return c
}
