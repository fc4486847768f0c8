// Command sum is a skein example tool written in Go: it adds numbers exactly.
//
// Like every skein tool it reads one JSON object of arguments on stdin and prints one JSON
// object on stdout: {"ok": true, "result": ...} or {"ok": false, "error": "..."}. It is its own
// tiny module with no dependencies, because a tool never links against skein.
package main

import (
	"encoding/json"
	"fmt"
	"math/big"
	"os"
)

type args struct {
	Numbers []json.Number `json:"numbers"`
}

type result struct {
	Sum   json.Number `json:"sum"`
	Count int         `json:"count"`
}

type answer struct {
	OK     bool    `json:"ok"`
	Error  string  `json:"error,omitempty"`
	Result *result `json:"result,omitempty"`
}

func main() {
	res, err := run()
	out := answer{OK: err == nil, Result: res}
	if err != nil {
		out.Error = err.Error()
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "sum: write answer:", err)
		os.Exit(2)
	}
	if !out.OK {
		os.Exit(1)
	}
}

func run() (*result, error) {
	dec := json.NewDecoder(os.Stdin)
	dec.UseNumber()
	var a args
	if err := dec.Decode(&a); err != nil {
		return nil, fmt.Errorf("arguments are not a JSON object with numbers: %w", err)
	}
	// Exact rational arithmetic, so 0.1 + 0.2 is 0.3 and large integers keep every digit.
	total := new(big.Rat)
	for i, n := range a.Numbers {
		r, ok := new(big.Rat).SetString(n.String())
		if !ok {
			return nil, fmt.Errorf("numbers[%d] = %s is not a number", i, n)
		}
		total.Add(total, r)
	}
	return &result{Sum: json.Number(decimal(total)), Count: len(a.Numbers)}, nil
}

// decimal prints r with as few fractional digits as represent it exactly (inputs are decimal
// numbers, so their sum is too).
func decimal(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	ten := big.NewInt(10)
	pow := big.NewInt(1)
	mod := new(big.Int)
	for k := 1; k <= 400; k++ {
		pow.Mul(pow, ten)
		if mod.Mod(pow, r.Denom()).Sign() == 0 {
			return r.FloatString(k)
		}
	}
	f, _ := r.Float64()
	return fmt.Sprint(f)
}
