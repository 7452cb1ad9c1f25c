// GO_SDK_LOG=1 prints the SDK's own log (connections, links, $cbs, retries) with the seconds
// since the start, for a look at what a failing test did on the wire.

package sdk_test

import (
	"fmt"
	"os"
	"time"

	azlog "github.com/Azure/azure-sdk-for-go/sdk/azcore/log"
)

func init() {
	if os.Getenv("GO_SDK_LOG") == "" {
		return
	}
	start := time.Now()
	azlog.SetListener(func(event azlog.Event, text string) {
		fmt.Printf("%7.3f [%s] %s\n", time.Since(start).Seconds(), event, text)
	})
}
