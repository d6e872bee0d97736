// The program of a layer check (cmake/RkvLayers.cmake): linking it is the
// check; it is never run.
int main() { return 0; }
