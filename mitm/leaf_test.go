package mitm

import (
	"crypto/ecdsa"
	"sync"
	"testing"
)

// TestLeafMintedOnceAheadOfNeed: Prepare mints in the background, and every
// concurrent Leaf call for the host gets that one ECDSA leaf.
func TestLeafMintedOnceAheadOfNeed(t *testing.T) {
	cf, kf := writeCA(t, true)
	a, err := LoadAuthority(cf, kf, 8)
	if err != nil {
		t.Fatal(err)
	}
	a.Prepare("up.test")
	got := make([]any, 16)
	var wg sync.WaitGroup
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := a.Leaf("up.test")
			if err != nil {
				t.Error(err)
				return
			}
			if _, ok := c.PrivateKey.(*ecdsa.PrivateKey); !ok {
				t.Errorf("leaf key %T, want ECDSA", c.PrivateKey)
			}
			got[i] = c
		}()
	}
	wg.Wait()
	for i := range got {
		if got[i] != got[0] {
			t.Fatal("concurrent handshakes minted more than one leaf for one host")
		}
	}
}
