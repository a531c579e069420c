package main

import (
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"svc/platform/sumtree"
)

func init() { ledgerSubcommands = append(ledgerSubcommands, ledgerVerifyProofCmd) }

// ledgerVerifyProofCmd is `svc ledger verify-proof FILE`: checks a proof of
// liabilities as GET /v1/users/{external_user_id}/liabilities-proof returns
// it, with no database (docs/provable-custody.md).
func ledgerVerifyProofCmd() *cobra.Command {
	var root, total, balance string
	c := &cobra.Command{
		Use:   "verify-proof FILE [--root HEX] [--total UNITS] [--balance UNITS]",
		Short: "Check that a user's balance is included in a published proof of liabilities",
		Long: `Reads a proof of liabilities (the JSON GET /v1/users/{external_user_id}/liabilities-proof
returns; - reads standard input) and checks it offline: the salted hash of the user's id, the
leaf, every sibling on the path (no sum negative or above 2^63-1, no sum that overflows), and that
the path leads to the root and total in the proof. --root and --total also require them to be the
ones published (GET /v1/admin/liabilities, the reconciliation report), --balance the user's
balance in smallest units. Exit 1 when the proof does not hold. docs/provable-custody.md
specifies the algorithm.`,
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
			p, err := sumtree.ParseProof(data)
			if err != nil {
				return err
			}
			v, err := sumtree.Verify(p)
			if err != nil {
				return err
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
			fmt.Fprintf(cmd.OutOrStdout(), "ok: %s of %s (smallest units) is included in the %s liabilities of %s: root %s, total %s, %d steps\n",
				strconv.FormatUint(v.Balance, 10), v.ExternalUserID, v.Asset, p.SnapshotAt, sumtree.HexOf(v.Root), strconv.FormatUint(v.Total, 10), v.Steps)
			return nil
		},
	}
	c.Flags().StringVar(&root, "root", "", "the published root (64 lowercase hex digits) the proof must lead to")
	c.Flags().StringVar(&total, "total", "", "the published total, in smallest units")
	c.Flags().StringVar(&balance, "balance", "", "the balance the user expects, in smallest units")
	return c
}
