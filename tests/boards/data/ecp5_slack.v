module top(input clk, input [7:0] a, b, output reg [7:0] q);
  reg [7:0] ra, rb, r1, r2;
  always @(posedge clk) begin
    ra <= a; rb <= b; r1 <= ra * rb; r2 <= r1 ^ {r1[3:0], r1[7:4]}; q <= r2 + r1;
  end
endmodule
