// Earmark's microphone tap, run on the audio thread: folds the input to mono, low-passes it below 7 kHz,
// resamples it to `targetRate` (16 kHz by default) and posts 0.1-s Float32Array chunks to the page, which sends
// them over the WebSocket as f32le. Fingerprints only use 250 Hz to 4 kHz, so 16 kHz loses nothing they need.
class EarmarkDownsampler extends AudioWorkletProcessor {
  constructor(options) {
    super();
    this.targetRate = (options.processorOptions && options.processorOptions.targetRate) || 16000;
    this.step = sampleRate / this.targetRate;           // input samples per output sample
    // Windowed-sinc low-pass (Blackman), cutoff a little under the output's Nyquist frequency.
    const cutoff = Math.min(0.45 * this.targetRate, 0.45 * sampleRate) / sampleRate;
    const taps = 63, mid = (taps - 1) / 2;
    this.kernel = new Float32Array(taps);
    let sum = 0;
    for (let i = 0; i < taps; i++) {
      const x = i - mid;
      const sinc = x === 0 ? 2 * cutoff : Math.sin(2 * Math.PI * cutoff * x) / (Math.PI * x);
      const w = 0.42 - 0.5 * Math.cos((2 * Math.PI * i) / (taps - 1)) + 0.08 * Math.cos((4 * Math.PI * i) / (taps - 1));
      this.kernel[i] = sinc * w;
      sum += this.kernel[i];
    }
    for (let i = 0; i < taps; i++) this.kernel[i] /= sum;
    this.history = new Float32Array(taps);  // ring of the last `taps` mono input samples
    this.head = 0;
    this.position = 0;                     // where the next output sample falls, in input samples from `prev`
    this.prev = 0;
    this.chunkSize = Math.round(this.targetRate / 10);
    this.chunk = new Float32Array(this.chunkSize);
    this.fill = 0;
  }

  process(inputs) {
    const input = inputs[0];
    if (!input || input.length === 0 || input[0].length === 0) return true;
    const channels = input.length, frames = input[0].length, k = this.kernel, n = k.length;
    for (let f = 0; f < frames; f++) {
      let mono = 0;
      for (let c = 0; c < channels; c++) mono += input[c][f];
      this.history[this.head] = mono / channels;
      this.head = (this.head + 1) % n;
      let y = 0;
      for (let i = 0, j = this.head; i < n; i++, j = (j + 1) % n) y += k[i] * this.history[j];
      // Linear interpolation between the previous and this filtered sample, at every output instant in between.
      while (this.position <= 1) {
        this.chunk[this.fill++] = this.prev + (y - this.prev) * this.position;
        this.position += this.step;
        if (this.fill === this.chunkSize) {
          this.port.postMessage(this.chunk.buffer, [this.chunk.buffer]);   // transferred: the array is now empty
          this.chunk = new Float32Array(this.chunkSize);
          this.fill = 0;
        }
      }
      this.position -= 1;
      this.prev = y;
    }
    return true;
  }
}

registerProcessor('earmark-downsampler', EarmarkDownsampler);
