// rag-vectors.js: the vector file of the public index (vector_encoding int16-bin) and its scan.
//
// embeddings-vectors.bin (rag_assets/index/vector_file.py) holds, per chunk in the index's
// order, int16 steps and a float32 scale: a component is step * scale. rag-search.js reads it
// with one fetch and keeps the steps as they are (no decoded float copy): 2 bytes a component.
// The cosine of a dense query (a sentence model's) with every row is an integer dot product
// over the steps, in WebAssembly SIMD where the browser has it (i32x4.dot_i16x8_s: eight
// multiply-adds an instruction), else in a JavaScript loop; both exact (integers below 2^53).

const VECTOR_MAGIC = "RAGVECS\0";

/** embeddings-vectors.bin as {generation, count, dimension, scales: Float32Array, steps:
 * Int16Array} (views of `buffer`); throws when it is not a whole version-1 file. */
export function parseVectorFile(buffer) {
  if (buffer.byteLength < 32) throw new Error(`${buffer.byteLength} bytes: shorter than the header (truncated)`);
  const view = new DataView(buffer);
  const magic = String.fromCharCode(...new Uint8Array(buffer, 0, 8));
  const [version, encoding, count, dimension, headerBytes, nameLength] = [8, 12, 16, 20, 24, 28].map((o) => view.getUint32(o, true));
  if (magic !== VECTOR_MAGIC || version !== 1 || encoding !== 1) throw new Error("not a version-1 int16 vector file");
  const expected = headerBytes + 4 * count + 2 * count * dimension;
  if (headerBytes < 32 + nameLength || headerBytes % 8 || buffer.byteLength !== expected) {
    throw new Error(`${buffer.byteLength} bytes where its header announces ${expected} (truncated or damaged)`);
  }
  return {
    generation: new TextDecoder().decode(new Uint8Array(buffer, 32, nameLength)) || null,
    count,
    dimension,
    scales: new Float32Array(buffer, headerBytes, count),
    steps: new Int16Array(buffer, headerBytes + 4 * count, count * dimension),
  };
}

export async function sha256Hex(buffer) {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", buffer));
  return Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
}

// ------------------------------------------------------------------ the WebAssembly scan

// scan(steps, query, out, rows, dim): out[row] = sum of steps[row][i] * query[i] as f64, for
// int16 rows and query at byte addresses `steps` and `query`, dim a multiple of 8. Per 8
// components: i32x4.dot_i16x8_s, its four sums widened to i64 (two i64x2 accumulators, so
// no sum can overflow). Assembled here (234 bytes) rather than shipped as a .wasm file: no
// build step and one file less to publish. In the text format:
//
//   (func (param $m i32) (param $q i32) (param $out i32) (param $rows i32) (param $dim i32)
//     (local $row i32) (local $i i32) (local $p i32) (local $a v128) (local $b v128) (local $d v128) (local $bytes i32)
//     $bytes = $dim << 1; $p = $m
//     block  (br_if 0 (i32.eqz $rows))
//       loop $rows: $a = $b = 0; $i = 0
//         loop $cols: $d = i32x4.dot_i16x8_s (v128.load $p+$i) (v128.load $q+$i)
//                     $a += i64x2.extend_low_i32x4_s $d; $b += i64x2.extend_high_i32x4_s $d
//                     $i += 16; br_if $cols ($i <u $bytes)
//         f64.store ($out + $row*8) (f64.convert_i64_s (lane0 + lane1 of $a + $b))
//         $p += $bytes; $row += 1; br_if $rows ($row <u $rows)
const leb = (n) => { const out = []; do { let b = n & 0x7f; n >>>= 7; if (n) b |= 0x80; out.push(b); } while (n); return out; };
const section = (id, bytes) => [id, ...leb(bytes.length), ...bytes];
const simd = (op) => [0xfd, ...leb(op)];
const get = (i) => [0x20, i];
const set = (i) => [0x21, i];
const tee = (i) => [0x22, i];
const ZERO = [...simd(12), ...new Array(16).fill(0)]; // v128.const 0
const SCAN_BODY = [
  3, 3, 0x7f, 3, 0x7b, 1, 0x7f, // locals: 5-7 i32, 8-10 v128, 11 i32
  ...get(4), 0x41, 1, 0x74, ...set(11), // bytes = dim << 1
  ...get(0), ...set(7), // p = m
  0x02, 0x40, ...get(3), 0x45, 0x0d, 0, // block; br_if (rows == 0)
  0x03, 0x40, ...ZERO, ...set(8), ...ZERO, ...set(9), 0x41, 0, ...set(6), // loop rows; a = b = 0; i = 0
  0x03, 0x40, // loop cols
  ...get(7), ...get(6), 0x6a, ...simd(0), 0, 0, // v128.load p + i
  ...get(1), ...get(6), 0x6a, ...simd(0), 0, 0, // v128.load q + i
  ...simd(186), ...set(10), // d = i32x4.dot_i16x8_s
  ...get(8), ...get(10), ...simd(199), ...simd(206), ...set(8), // a += i64x2.extend_low_i32x4_s d
  ...get(9), ...get(10), ...simd(200), ...simd(206), ...set(9), // b += i64x2.extend_high_i32x4_s d
  ...get(6), 0x41, 16, 0x6a, ...tee(6), ...get(11), 0x49, 0x0d, 0, 0x0b, // i += 16; br_if (i < bytes); end
  ...get(2), ...get(5), 0x41, 3, 0x74, 0x6a, // out + row * 8
  ...get(8), ...get(9), ...simd(206), ...tee(10), ...simd(29), 0, ...get(10), ...simd(29), 1, 0x7c, // lanes added
  0xb9, 0x39, 3, 0, // f64.convert_i64_s; f64.store
  ...get(7), ...get(11), 0x6a, ...set(7), // p += bytes
  ...get(5), 0x41, 1, 0x6a, ...tee(5), ...get(3), 0x49, 0x0d, 0, 0x0b, // row += 1; br_if (row < rows); end
  0x0b, 0x0b, // end block, end function
];
const SCAN_MODULE = new Uint8Array([
  0x00, 0x61, 0x73, 0x6d, 1, 0, 0, 0,
  ...section(1, [1, 0x60, 5, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0]), // type: (i32 x 5) -> ()
  ...section(2, [1, 1, 0x65, 1, 0x6d, 0x02, 0x00, 1]), // import memory "e" "m", at least 1 page
  ...section(3, [1, 0]),
  ...section(7, [1, 4, 0x73, 0x63, 0x61, 0x6e, 0x00, 0]), // export "scan"
  ...section(10, [1, ...leb(SCAN_BODY.length), ...SCAN_BODY]),
]);

let scanModule; // compiled once a page; null where WebAssembly SIMD is missing

function compiledScan() {
  if (scanModule === undefined) {
    try {
      scanModule = globalThis.WebAssembly && WebAssembly.validate(SCAN_MODULE) ? new WebAssembly.Module(SCAN_MODULE) : null;
    } catch {
      scanModule = null;
    }
  }
  return scanModule;
}

// ------------------------------------------------------------------ the matrix

/** The int16 rows of a vector file and their scales, and the cosine of a query with them.
 * With WebAssembly the steps are copied once into its memory (the fetched buffer is then
 * dropped, so the page holds them once) and scanned there. `wasm: false` keeps the
 * JavaScript loop (tests compare the two). */
export class StepMatrix {
  constructor(file, { wasm = true } = {}) {
    const { count, dimension } = file;
    this.rows = count;
    this.dimension = dimension;
    this.scales = file.scales.slice(); // a copy: the file's buffer is not kept for them
    const module = wasm && dimension % 8 === 0 && count > 0 ? compiledScan() : null;
    if (!module) {
      this.steps = file.steps;
      this.query = new Int32Array(dimension);
      this.sums = new Float64Array(count);
      this.scan = null;
      return;
    }
    const stepBytes = count * dimension * 2;
    const sumsAt = stepBytes + dimension * 2 + ((8 - ((stepBytes + dimension * 2) % 8)) % 8);
    const memory = new WebAssembly.Memory({ initial: Math.ceil((sumsAt + 8 * count) / 65536) });
    this.steps = new Int16Array(memory.buffer, 0, count * dimension);
    this.steps.set(file.steps);
    this.query = new Int16Array(memory.buffer, stepBytes, dimension);
    this.sums = new Float64Array(memory.buffer, sumsAt, count);
    const run = new WebAssembly.Instance(module, { e: { m: memory } }).exports.scan;
    this.scan = () => run(0, stepBytes, sumsAt, count, dimension);
  }

  /** Every row's cosine with the dense query `q` into `out`. The query is put in steps of its
   * own (max |q| / 32767), so the dot products are of integers and exact; the query's rounding
   * moves a cosine by about 1e-6 (at most sum |x| * step / 2), as the rows' own int16 does. */
  denseCosines(q, out) {
    const dim = this.dimension;
    let top = 0;
    for (let i = 0; i < dim; i++) top = Math.max(top, Math.abs(q[i]));
    const step = top > 0 ? top / 32767 : 1;
    const query = this.query;
    for (let i = 0; i < dim; i++) query[i] = Math.round(q[i] / step);
    const sums = this.sums;
    if (this.scan) this.scan();
    else this.jsScan();
    const scales = this.scales;
    for (let row = 0; row < this.rows; row++) out[row] = sums[row] * scales[row] * step;
    return out;
  }

  // The same sums in JavaScript (no WebAssembly SIMD, or a dimension not a multiple of 8).
  jsScan() {
    const dim = this.dimension;
    const m = this.steps;
    const q = this.query;
    const sums = this.sums;
    const tail = dim - (dim % 4);
    for (let row = 0, o = 0; row < this.rows; row++, o += dim) {
      let s0 = 0, s1 = 0;
      let i = 0;
      for (; i < tail; i += 4) {
        const p = o + i;
        s0 += m[p] * q[i] + m[p + 1] * q[i + 1];
        s1 += m[p + 2] * q[i + 2] + m[p + 3] * q[i + 3];
      }
      for (; i < dim; i++) s0 += m[o + i] * q[i];
      sums[row] = s0 + s1;
    }
  }
}
