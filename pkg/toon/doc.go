// Package toon implements TOON (Token-Oriented Object Notation), the compact
// line-oriented encoding of the JSON data model that skein uses to put tool
// results into a model's context.
//
// The codec targets the TOON specification version in SpecVersion
// (toon-spec: 4.0) and is checked against the specification's published
// conformance fixtures and, differentially, against the reference
// implementation (see docs/toon.md).
//
// Data model. Decoded documents are built from:
//
//	nil, bool, string     JSON null, booleans and strings
//	Number                a JSON number, kept as exact decimal text
//	*Object               an object with its key order preserved
//	[]any                 an array
//
// DecodeString, DecodeBytes and Decode return this model; Unmarshal decodes
// into structs, maps or any the way json.Unmarshal would, and ToAny turns a
// decoded value into plain maps and slices. Encode accepts the same types
// plus ordinary Go values (maps, structs,
// slices, numeric types, json.Marshaler): anything that is not already in
// the model above is normalized through encoding/json first, so struct tags
// and MarshalJSON hooks apply (spec §3). Maps encode with sorted keys, as
// encoding/json orders them; use *Object to control key order.
//
// Numbers. The codec is lossless: a decoded number keeps every digit of its
// token (normalized to the §2 canonical form, so 1.5000 becomes 1.5 and -0
// becomes 0), and numbers outside float64's range or precision are neither
// rounded nor rejected. The encoder emits numbers in canonical decimal form
// when 1e-6 <= |n| < 1e21 and otherwise in exponent form with a lowercase e
// and an explicit exponent sign (1e-7, 1.5e+21), which is the form the
// reference implementation produces for float64 values. NaN and infinities
// encode as null.
//
// Prototype-like keys (__proto__, constructor, prototype) have no meaning in
// Go and are ordinary keys everywhere.
//
// Non-strict decoding follows the permissions of the specification: declared
// lengths [N] are not enforced (items are read until their scope ends), a
// scope's first line may sit more than one level deeper, duplicate keys
// resolve last-write-wins (the value replaces the earlier one in its
// original position), indentation that is not a multiple of the indent size
// is floored, each tab in indentation counts as one level, ill-formed UTF-8
// is replaced by U+FFFD (strict mode rejects it), blank lines inside arrays
// are ignored, and a malformed array header falls through to a key-value
// line with a literal key. Everything else the specification lists
// as a strict-mode error is an error in both modes.
package toon

// SpecVersion is the TOON specification version this package implements.
const SpecVersion = "4.0"
