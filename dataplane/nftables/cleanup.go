package nftables

import (
	"context"
	"fmt"

	"sigs.k8s.io/knftables"
)

// Cleanup deletes a table (svcnet's, or kube-proxy's when a node leaves
// kube-proxy's nftables mode) if it is there; nothing else is touched.
func Cleanup(ctx context.Context, nft knftables.Interface) error {
	if _, err := nft.List(ctx, "chains"); err != nil {
		if knftables.IsNotFound(err) {
			return nil
		}
		return err
	}
	tx := nft.NewTransaction()
	tx.Delete(&knftables.Table{})
	if err := nft.Run(ctx, tx); err != nil && !knftables.IsNotFound(err) {
		return fmt.Errorf("deleting the table: %w", err)
	}
	return nil
}
