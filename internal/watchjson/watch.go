// Package watchjson watches one typed resource with a JSON decoder that reads each event once.
//
// client-go's watch decoder reads each event's JSON about seven times: once to find where the
// event ends (encoding/json's Decoder), then for the event and again for the object inside it
// once to find its apiVersion and kind, once to check that it is valid JSON and once to decode
// it. On a cold start the informer's watch list streams every object through it: at 100,000
// LockRequests that decoder was 48% of the manager's CPU (docs/performance.md, cold start).
//
// The API server writes a JSON watch stream one compact event per line (each event encoded
// with a trailing newline; a JSON string cannot hold a raw newline). So a line is an event, and
// one decode of the line into {type, object *T} is the whole event: the line is read twice
// (validated, decoded), not seven times. An ERROR event, whose object is a Status, is decoded
// again as one.
package watchjson

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	kjson "sigs.k8s.io/json"
)

// maxLine is the longest event accepted, as client-go's streaming decoder accepts.
const maxLine = 16 << 20

// Object is the pointer type of a typed API object T.
type Object[T any] interface {
	*T
	runtime.Object
}

// Watcher starts watches of one resource of kind gvk, decoded into *T.
type Watcher[T any, PT Object[T]] struct {
	client   rest.Interface
	resource string
	gvk      schema.GroupVersionKind
	params   runtime.ParameterCodec
}

// New is a Watcher of resource (e.g. "lockrequests") of kind gvk, through a REST client made
// from cfg that shares httpClient's connections; scheme encodes its query parameters and
// decodes the Status of a refused watch (a 410 Gone, a 429), as controller-runtime's client
// does. Its watches are not rate limited, as client-go's are not (a watch is one long request).
func New[T any, PT Object[T]](cfg *rest.Config, httpClient *http.Client, scheme *runtime.Scheme, gvk schema.GroupVersionKind, resource string) (*Watcher[T, PT], error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &schema.GroupVersion{Group: gvk.Group, Version: gvk.Version}
	c.APIPath = "/apis"
	if gvk.Group == "" {
		c.APIPath = "/api"
	}
	c.ContentType = runtime.ContentTypeJSON
	c.AcceptContentTypes = runtime.ContentTypeJSON
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	c.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	client, err := rest.RESTClientForConfigAndClient(c, httpClient)
	if err != nil {
		return nil, err
	}
	return &Watcher[T, PT]{client: client, resource: resource, gvk: gvk, params: runtime.NewParameterCodec(scheme)}, nil
}

// Watch starts a watch with opts (Watch is set), cluster-wide, as controller-runtime's cache
// starts one for an informer without a namespace or selectors. When the connection fails
// before the server answers (EOF, a timeout) it returns a watch that has ended, as client-go
// does, and the reflector starts again.
func (w *Watcher[T, PT]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	body, err := w.client.Get().Resource(w.resource).VersionedParams(&opts, w.params).Stream(ctx)
	if err != nil {
		if utilnet.IsProbableEOF(err) || utilnet.IsTimeout(err) {
			return watch.NewEmptyWatch(), nil
		}
		return nil, err
	}
	return watch.NewStreamWatcher(newDecoder[T, PT](body, w.gvk),
		// As client-go's: 500 says the cause is not known.
		apierrors.NewClientErrorReporter(http.StatusInternalServerError, http.MethodGet, "ClientWatchDecoding")), nil
}

// decoder reads events of *T from a JSON watch stream, one line each.
type decoder[T any, PT Object[T]] struct {
	body io.ReadCloser
	r    *bufio.Reader
	gvk  schema.GroupVersionKind
	long []byte // a line longer than r's buffer, gathered
}

func newDecoder[T any, PT Object[T]](body io.ReadCloser, gvk schema.GroupVersionKind) *decoder[T, PT] {
	return &decoder[T, PT]{body: body, r: bufio.NewReaderSize(body, 64<<10), gvk: gvk}
}

// event is a watch event whose object is decoded as O.
type event[O any] struct {
	Type   watch.EventType `json:"type"`
	Object *O              `json:"object"`
}

// Decode returns the next event: its type and its object, a *T (a *metav1.Status for ERROR),
// with its apiVersion and kind cleared as client-go's decoder clears them.
func (d *decoder[T, PT]) Decode() (watch.EventType, runtime.Object, error) {
	line, err := d.next()
	if err != nil {
		return "", nil, err
	}
	var ev event[T]
	decodeErr := kjson.UnmarshalCaseSensitivePreserveInts(line, &ev)
	if ev.Type == watch.Error || (decodeErr != nil && eventType(line) == watch.Error) {
		var st event[metav1.Status]
		if err := kjson.UnmarshalCaseSensitivePreserveInts(line, &st); err != nil {
			return "", nil, fmt.Errorf("unable to decode watch event: %w", err)
		}
		if st.Object == nil {
			return "", nil, errors.New("unable to decode watch event: an ERROR event without an object")
		}
		st.Object.TypeMeta = metav1.TypeMeta{}
		return watch.Error, st.Object, nil
	}
	if decodeErr != nil {
		return "", nil, fmt.Errorf("unable to decode watch event: %w", decodeErr)
	}
	switch ev.Type {
	case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
	default:
		return "", nil, fmt.Errorf("got invalid watch event type: %v", ev.Type)
	}
	if ev.Object == nil {
		return "", nil, fmt.Errorf("unable to decode watch event: a %s event without an object", ev.Type)
	}
	obj := PT(ev.Object)
	// guard:watchjson-kind
	if gvk := obj.GetObjectKind().GroupVersionKind(); gvk != d.gvk {
		return "", nil, fmt.Errorf("unable to decode watch event: a %s event of %v, want %v", ev.Type, gvk, d.gvk)
	}
	obj.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	return ev.Type, obj, nil
}

// eventType is the type of the event line holds, when its object did not decode.
func eventType(line []byte) watch.EventType {
	var ev struct {
		Type watch.EventType `json:"type"`
	}
	_ = kjson.UnmarshalCaseSensitivePreserveInts(line, &ev)
	return ev.Type
}

// next is the next non-empty line, without its newline. It is valid until the next call.
func (d *decoder[T, PT]) next() ([]byte, error) {
	for {
		line, err := d.r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			d.long = append(d.long[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				if len(d.long) > maxLine {
					return nil, fmt.Errorf("a watch event longer than %d bytes", maxLine)
				}
				line, err = d.r.ReadSlice('\n')
				d.long = append(d.long, line...)
			}
			line = d.long
		}
		if err != nil {
			if errors.Is(err, io.EOF) && len(bytes.TrimSpace(line)) > 0 {
				// The stream ended within an event.
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		// guard:watchjson-skips-blank
		if line = bytes.TrimSpace(line); len(line) > 0 {
			return line, nil
		}
	}
}

// Close closes the stream.
func (d *decoder[T, PT]) Close() {
	_ = d.body.Close()
}
